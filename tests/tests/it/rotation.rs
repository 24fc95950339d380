//! Key rotation (SPEC §8) against real PostgreSQL: `herald keys rotate` re-encrypts every destination
//! not under the current key, in batches, is safe to interrupt and re-run, never overwrites a change
//! made while it runs, and afterwards the old key can be removed with nothing lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use herald_channels::cipher::{CipherError, Keyring};
use herald_core::usecases::{rotate_keys, RotationReport};
use herald_core::worker::Report;
use herald_domain::{ChannelName, UserId};
use herald_ports::{ChannelPref, PreferenceStore, StoreError, StoredDestination};
use herald_postgres::PgStore;
use herald_tests::{ClockMode, World};
use secrecy::{ExposeSecret as _, SecretString};

const USERS: [&str; 5] = ["rot-a", "rot-b", "rot-c", "rot-d", "rot-e"];
const CHANNELS: [&str; 3] = ["push", "sms", "miao"];

struct Keys {
    k1: SecretString,
    k2: SecretString,
}

impl Keys {
    fn new() -> Keys {
        Keys { k1: Keyring::generate_key(), k2: Keyring::generate_key() }
    }

    fn ring(&self, ids: &[&str], current: &str) -> Keyring {
        let pick = |id: &str| match id {
            "k1" => self.k1.clone(),
            _ => self.k2.clone(),
        };
        Keyring::new(ids.iter().map(|id| ((*id).to_owned(), pick(id))), current).expect("a valid keyring")
    }
}

fn plaintext(user: &str, channel: &str) -> String {
    format!("rotation-dest-{user}-{channel}")
}

/// Every stored destination, in `(user_id, channel)` order.
async fn rows(store: &PgStore) -> anyhow::Result<Vec<StoredDestination>> {
    Ok(store.destinations_after(None, 1_000).await?)
}

/// Stores every user's destination on every channel under `ring`, enabled.
async fn store_all(world: &World, ring: &Keyring) -> anyhow::Result<()> {
    for user in USERS {
        for channel in CHANNELS {
            let bytes = ring.encrypt(user, channel, &SecretString::from(plaintext(user, channel)))?;
            world.store.put(&UserId::from(user), &ChannelName::from(channel), true, Some(bytes)).await?;
        }
    }
    Ok(())
}

/// Asserts every row is under `key_id` and opens to its original plaintext with `ring`.
async fn assert_all_under(world: &World, ring: &Keyring, key_id: &str) -> anyhow::Result<()> {
    let rows = rows(&world.store).await?;
    assert_eq!(rows.len(), USERS.len() * CHANNELS.len());
    for row in &rows {
        let (user, channel) = (row.user_id.as_str(), row.channel.as_str());
        assert_eq!(Keyring::key_id_of(&row.ciphertext)?, key_id, "{user}/{channel}");
        let opened = ring.decrypt(user, channel, &row.ciphertext)?;
        assert_eq!(opened.expose_secret(), plaintext(user, channel), "{user}/{channel} decrypts unchanged");
    }
    Ok(())
}

/// Submits one notification for `user` and runs the worker; returns its reports.
async fn deliver(world: &World, user: &str, event: &str) -> anyhow::Result<Vec<Report>> {
    let created = world.submit(user, event, 60_000, None).await?;
    assert_eq!(created.tasks.len(), CHANNELS.len());
    Ok(world.worker("rotation-worker", 5_000).drain(10).await?)
}

fn sent(reports: &[Report]) -> usize {
    reports.iter().filter(|r| matches!(r, Report::Sent(_))).count()
}

#[tokio::test]
async fn rotation_moves_every_row_to_the_current_key_and_then_the_old_key_can_go() -> anyhow::Result<()> {
    let mut world = World::new(ClockMode::Manual).await?;
    let keys = Keys::new();
    store_all(&world, &keys.ring(&["k1"], "k1")).await?;
    // A preference without a destination is not a row to rotate.
    world.store.put(&UserId::from("rot-none"), &ChannelName::from("push"), false, None).await?;
    // Verification and version belong to the destination, which rotation does not change.
    let (verified_user, verified_channel) = (UserId::from("rot-a"), ChannelName::from("push"));
    let tested = world.store.destination(&verified_user, &verified_channel).await?.expect("stored");
    assert!(world.store.record_test_accepted(&verified_user, &verified_channel, &tested).await?);
    assert!(world.store.mark_verified(&verified_user, &verified_channel).await?);
    let before: Vec<ChannelPref> = prefs_of(&world.store).await?;
    assert_all_under(&world, &keys.ring(&["k1"], "k1"), "k1").await?;

    // The operator adds k2 and makes it current, keeping k1 loaded; rotates in batches of 2.
    let both = keys.ring(&["k1", "k2"], "k2");
    let report = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &*world.store,
        &both,
        (&*world.store, &world.store.clock()),
        2,
    )
    .await?;
    assert_eq!(report, RotationReport { examined: 15, rotated: 15, skipped: 0, ..RotationReport::default() });
    assert_all_under(&world, &both, "k2").await?;
    assert_eq!(prefs_of(&world.store).await?, before, "switches, verification and versions are untouched");

    // A second run finds nothing to do and leaves the bytes exactly as they are.
    let rotated = rows(&world.store).await?;
    let again = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &*world.store,
        &both,
        (&*world.store, &world.store.clock()),
        2,
    )
    .await?;
    assert_eq!(again, RotationReport { examined: 15, rotated: 0, skipped: 0, ..RotationReport::default() });
    assert_eq!(rows(&world.store).await?, rotated, "no row re-encrypted twice");

    // A worker with both keys delivers to the original destinations.
    world.cipher = Arc::new(both);
    let reports = deliver(&world, "rot-a", "after-rotation").await?;
    assert_eq!(sent(&reports), 3, "{reports:?}");
    assert_eq!(world.push.sends_to(&plaintext("rot-a", "push")), 1);
    assert_eq!(world.sms.sends_to(&plaintext("rot-a", "sms")), 1);
    assert_eq!(world.miao.sends_to(&plaintext("rot-a", "miao")), 1);

    // k1 removed: everything still opens and delivers.
    let only_k2 = keys.ring(&["k2"], "k2");
    assert_all_under(&world, &only_k2, "k2").await?;
    world.cipher = Arc::new(only_k2);
    let reports = deliver(&world, "rot-e", "after-removal").await?;
    assert_eq!(sent(&reports), 3, "{reports:?}");
    assert_eq!(world.push.sends_to(&plaintext("rot-e", "push")), 1);
    assert_eq!(world.miao.sends_to(&plaintext("rot-e", "miao")), 1);

    // And the proof that the rows really moved: a ring with only k1 can open none of them.
    let only_k1 = keys.ring(&["k1"], "k1");
    for row in rows(&world.store).await? {
        let error = only_k1.decrypt(row.user_id.as_str(), row.channel.as_str(), &row.ciphertext).err();
        assert_eq!(error, Some(CipherError::UnknownKey { key_id: "k2".into() }));
    }
    Ok(())
}

async fn prefs_of(store: &PgStore) -> anyhow::Result<Vec<ChannelPref>> {
    let mut out = Vec::new();
    for user in USERS.iter().copied().chain(["rot-none"]) {
        for channel in CHANNELS {
            if let Some(pref) = store.get(&UserId::from(user), &ChannelName::from(channel)).await? {
                out.push(pref);
            }
        }
    }
    Ok(out)
}

/// The real store, with a rotation that is cut off after a number of replacements (the process was
/// killed, the database went away) and, optionally, a user who changes a destination between the
/// rotation's read and its write.
struct Unreliable {
    inner: PgStore,
    /// Replacements allowed before every further one fails.
    replacements_left: AtomicUsize,
    /// Before the replacement of this row, store this new ciphertext as a concurrent writer would.
    concurrent: Mutex<Option<(UserId, ChannelName, Vec<u8>)>>,
}

impl Unreliable {
    fn new(inner: PgStore, replacements: usize) -> Unreliable {
        Unreliable { inner, replacements_left: AtomicUsize::new(replacements), concurrent: Mutex::new(None) }
    }
}

#[async_trait]
impl PreferenceStore for Unreliable {
    async fn put(
        &self,
        user: &UserId,
        channel: &ChannelName,
        enabled: bool,
        destination: Option<Vec<u8>>,
    ) -> Result<ChannelPref, StoreError> {
        self.inner.put(user, channel, enabled, destination).await
    }

    async fn get(&self, user: &UserId, channel: &ChannelName) -> Result<Option<ChannelPref>, StoreError> {
        self.inner.get(user, channel).await
    }

    async fn destination(&self, user: &UserId, channel: &ChannelName) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.destination(user, channel).await
    }

    async fn record_test_accepted(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError> {
        self.inner.record_test_accepted(user, channel, tested).await
    }

    async fn record_destination_gone(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError> {
        self.inner.record_destination_gone(user, channel, tested).await
    }

    async fn mark_verified(&self, user: &UserId, channel: &ChannelName) -> Result<bool, StoreError> {
        self.inner.mark_verified(user, channel).await
    }

    async fn destinations_after(
        &self,
        after: Option<(UserId, ChannelName)>,
        limit: u32,
    ) -> Result<Vec<StoredDestination>, StoreError> {
        self.inner.destinations_after(after, limit).await
    }

    async fn key_ids_in_use(&self) -> Result<Vec<String>, StoreError> {
        self.inner.key_ids_in_use().await
    }

    async fn replace_destination(
        &self,
        user: &UserId,
        channel: &ChannelName,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        let change = {
            let mut concurrent = self.concurrent.lock().expect("lock");
            match concurrent.as_ref() {
                Some((u, c, _)) if u == user && c == channel => concurrent.take(),
                _ => None,
            }
        };
        if let Some((u, c, bytes)) = change {
            self.inner.put(&u, &c, true, Some(bytes)).await?;
        }
        let allowed = self.replacements_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if allowed.is_err() {
            return Err(StoreError::Unavailable(anyhow::anyhow!("connection lost (simulated interruption)")));
        }
        self.inner.replace_destination(user, channel, old, new).await
    }
}

#[tokio::test]
async fn an_interrupted_rotation_resumes_and_never_overwrites_a_concurrent_change() -> anyhow::Result<()> {
    let world = World::new(ClockMode::Manual).await?;
    let keys = Keys::new();
    let old_ring = keys.ring(&["k1"], "k1");
    let both = keys.ring(&["k1", "k2"], "k2");
    store_all(&world, &old_ring).await?;

    // Batches of one; the run dies after four rows.
    let flaky = Unreliable::new((*world.store).clone(), 4);
    let error = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &flaky,
        &both,
        (&*world.store, &world.store.clock()),
        1,
    )
    .await
    .expect_err("the interruption surfaces");
    assert!(format!("{error:#}").contains("unavailable"), "{error:#}");
    let under = |rows: &[StoredDestination], id: &str| {
        rows.iter().filter(|r| Keyring::key_id_of(&r.ciphertext).is_ok_and(|k| k == id)).count()
    };
    let after_cut = rows(&world.store).await?;
    assert_eq!((under(&after_cut, "k2"), under(&after_cut, "k1")), (4, 11), "four rows done, the rest untouched");

    // The re-run, while a user changes a destination between the rotation's read and its write. The
    // change comes from a process still configured with k1 as current.
    let changed = "rotation-dest-changed-by-the-user";
    let (user, channel) = (UserId::from("rot-c"), ChannelName::from("sms"));
    let flaky = Unreliable::new((*world.store).clone(), usize::MAX);
    *flaky.concurrent.lock().expect("lock") = Some((
        user.clone(),
        channel.clone(),
        old_ring.encrypt(user.as_str(), channel.as_str(), &SecretString::from(changed))?,
    ));
    let report = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &flaky,
        &both,
        (&*world.store, &world.store.clock()),
        1,
    )
    .await?;
    assert_eq!(report, RotationReport { examined: 15, rotated: 10, skipped: 1, ..RotationReport::default() });
    assert!(flaky.concurrent.lock().expect("lock").is_none(), "the concurrent change happened");
    let stored = world.store.destination(&user, &channel).await?.expect("a destination");
    assert_eq!(both.decrypt(user.as_str(), channel.as_str(), &stored)?.expose_secret(), changed, "the change survived");
    assert_eq!(Keyring::key_id_of(&stored)?, "k1", "written by the old configuration");

    // One more run picks the changed row up; nothing is rotated twice.
    let report = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &*world.store,
        &both,
        (&*world.store, &world.store.clock()),
        1,
    )
    .await?;
    assert_eq!(report, RotationReport { examined: 15, rotated: 1, skipped: 0, ..RotationReport::default() });
    let only_k2 = keys.ring(&["k2"], "k2");
    for row in rows(&world.store).await? {
        let (u, c) = (row.user_id.as_str(), row.channel.as_str());
        assert_eq!(Keyring::key_id_of(&row.ciphertext)?, "k2", "{u}/{c}");
        let expected = if (u, c) == ("rot-c", "sms") { changed.to_owned() } else { plaintext(u, c) };
        // Opened once with the new key: a double encryption would open to ciphertext, not to this.
        assert_eq!(only_k2.decrypt(u, c, &row.ciphertext)?.expose_secret(), expected, "{u}/{c}");
    }
    Ok(())
}

#[tokio::test]
async fn rotation_skips_and_names_a_row_whose_key_is_not_loaded_and_writes_nothing_for_it() -> anyhow::Result<()> {
    let world = World::new(ClockMode::Manual).await?;
    let keys = Keys::new();
    store_all(&world, &keys.ring(&["k1"], "k1")).await?;
    let before = rows(&world.store).await?;
    // k1 forgotten before the rotation: no row can be opened. Each is reported, none is written, and the
    // rotation does not stop at the first.
    let report = rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &*world.store,
        &keys.ring(&["k2"], "k2"),
        (&*world.store, &world.store.clock()),
        5,
    )
    .await?;
    assert_eq!((report.examined, report.rotated, report.unreadable.len()), (15, 0, 15));
    let message = report.to_string();
    assert!(message.contains("user rot-a on channel miao") && message.contains("k1"), "{message}");
    assert!(!message.contains("rotation-dest"), "the report never carries the destination: {message}");
    assert_eq!(rows(&world.store).await?, before, "nothing was written");
    Ok(())
}

/// After a rotation no ciphertext under the old key is left anywhere: not in the destinations, and not
/// in the marks of accepted test sends — also the mark of a destination that was changed since (it
/// named a ciphertext no longer stored, and goes).
#[tokio::test]
async fn no_old_key_ciphertext_survives_a_rotation_anywhere_in_the_database() -> anyhow::Result<()> {
    let world = World::new(ClockMode::Manual).await?;
    let keys = Keys::new();
    let k1 = keys.ring(&["k1"], "k1");
    store_all(&world, &k1).await?;
    // Two accepted tests: one for the stored destination, one for a destination changed afterwards.
    for user in ["rot-a", "rot-b"] {
        let (u, c) = (UserId::from(user), ChannelName::from("push"));
        let stored = world.store.destination(&u, &c).await?.expect("stored");
        assert!(world.store.record_test_accepted(&u, &c, &stored).await?);
    }
    let changed = k1.encrypt("rot-b", "push", &SecretString::from("rotation-dest-changed"))?;
    world.store.put(&UserId::from("rot-b"), &ChannelName::from("push"), true, Some(changed)).await?;

    let both = keys.ring(&["k1", "k2"], "k2");
    rotate_keys(
        &herald_core::usecases::Actor::command_line("test"),
        &*world.store,
        &both,
        (&*world.store, &world.store.clock()),
        4,
    )
    .await?;
    assert_eq!(world.store.key_ids_in_use().await?, ["k2"], "only k2 is in use");
    // Every bytea value of every table, as the server would dump it: none starts with k1's id.
    let sealed: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT destination FROM channel_pref WHERE destination IS NOT NULL \
         UNION ALL SELECT tested_destination FROM channel_pref WHERE tested_destination IS NOT NULL",
    )
    .fetch_all(world.store.pool())
    .await?;
    assert!(!sealed.is_empty());
    assert!(
        sealed.iter().all(|bytes| Keyring::key_id_of(bytes).is_ok_and(|id| id == "k2")),
        "only k2 ciphertext remains"
    );
    // Every other bytea column holds SHA-256 digests (of session ids, tokens, link codes), never ciphertext.
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND data_type = 'bytea' AND table_name <> '_sqlx_migrations' \
         AND column_name NOT LIKE '%\\_digest'",
    )
    .fetch_all(world.store.pool())
    .await?;
    assert_eq!(columns.len(), 2, "the two columns above are every bytea column but digests: {columns:?}");
    // The accepted test of the unchanged destination still confirms; the moot one is gone.
    assert!(world.store.mark_verified(&UserId::from("rot-a"), &ChannelName::from("push")).await?);
    assert!(!world.store.mark_verified(&UserId::from("rot-b"), &ChannelName::from("push")).await?);
    Ok(())
}
