//! Races and crash points found in a correctness review, each reproduced against real PostgreSQL.
//!
//! Interleavings are forced with row locks held by the test itself, and each step waits until
//! PostgreSQL reports the other session as waiting on a lock — synchronisation on the database's own
//! state, not on time.

use herald_channels::config::DigestSetting;
use herald_core::worker::Report;
use herald_domain::{EventKey, Millis, TaskState, ThreadKey, UserId};
use herald_ports::prelude::*;
use herald_ports::store::NewNotification;
use herald_tests::wait::wait_until;
use herald_tests::world::{ClockMode, World, T0};
use sqlx::Connection;

const TWO_HOURS: u64 = 7_200_000;

/// Waits until at least `n` sessions of this test's database wait on a lock.
async fn until_waiting_on_locks(world: &World, n: i64) {
    wait_until("sessions waiting on a lock", || async { sessions_waiting_on_locks(world).await >= n }).await;
}

/// Sessions of this test's database that wait on a lock.
async fn sessions_waiting_on_locks(world: &World) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(world.store.pool())
    .await
    .expect("pg_stat_activity")
}

/// An event that joins a digest while a worker is claiming that digest (SPEC §7: "every later event in
/// the window joins the same digest and increments its count") must not be counted into a digest whose
/// text was already taken by the claim: its prompt would be neither in the sent digest's text nor in
/// any later prompt.
///
/// The claim is the real one. It is held after it has locked the digest task and before it commits by
/// the test holding the channel's egress row (which a claim locks for a rate-limited channel). The
/// event's `create` read the open digest while the claim was uncommitted; its clock read was taken just
/// before the digest fell due, as any request in flight at the end of a window has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_joining_a_digest_being_claimed_is_not_lost_from_the_prompt() {
    let world = World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.digest = Some(DigestSetting { instant_per_hour: 3, window_secs: None });
        // Any interval makes the claim lock the egress row. The held claim takes real time: the slot
        // must outlast it (reservations are interval + guard apart, far less than the 10 s steps).
        push.min_interval_ms = Some(1);
        push.egress_guard_ms = Some(5_000);
    })
    .await
    .expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let worker = world.worker("w1", 60_000);
    let dest = World::destination("u1", "push");
    for (n, at) in [0u64, 10, 20].into_iter().enumerate() {
        world.manual.set(T0 + Millis::from_secs(at));
        let created = world.submit_in_thread("u1", &format!("e{n}"), TWO_HOURS, "order-1").await.expect("submit");
        assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Sent(created.tasks[0].task_id)]);
    }
    world.manual.set(T0 + Millis::from_secs(30));
    let fourth = world.submit_in_thread("u1", "e3", TWO_HOURS, "order-1").await.expect("4th opens the digest");
    let digest = fourth.tasks[0].task_id;

    // Hold the egress row: the claim below locks the digest task, then waits here before committing.
    let mut holder = sqlx::PgConnection::connect(&world.db.url).await.expect("connect");
    let mut hold = holder.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM channel_egress WHERE channel = 'push' FOR UPDATE")
        .execute(&mut *hold)
        .await
        .expect("lock egress row");
    world.manual.set(T0 + Millis::from_secs(3_600));
    let claiming = tokio::spawn(async move { worker.run_once().await });
    until_waiting_on_locks(&world, 1).await;

    // The 5th event, its clock read one second before the digest fell due.
    let store = world.store.clone();
    let table = world.table();
    let joining = tokio::spawn(async move {
        let new = NewNotification {
            user_id: UserId::from("u1"),
            event_key: EventKey::from("e4"),
            body: "Event e4".into(),
            ttl: Millis(TWO_HOURS),
            max_attempts: None,
            thread_key: Some(ThreadKey::from("order-1")),
            submitted_by: None,
        };
        store.create(&new, &table, T0 + Millis::from_secs(3_599)).await
    });
    // Either it waits on the digest row held by the claim, or it has already finished.
    wait_until("the join to wait on the digest row, or to finish", || async {
        joining.is_finished() || sessions_waiting_on_locks(&world).await >= 2
    })
    .await;
    hold.commit().await.expect("release egress row");
    let cycle = claiming.await.expect("claim task").expect("cycle");
    assert_eq!(cycle, vec![Report::Sent(digest)], "the digest goes out");
    let fifth = joining.await.expect("create task").expect("5th created");
    assert!(fifth.created);

    let sent = world.task(fourth.notification_id, digest).await.expect("digest");
    assert_eq!(sent.state, TaskState::Sent);
    let texts = world.push.texts_to(&dest);
    let prompted_in_digest = if texts.last().map(String::as_str) == Some("2 new updates") { 2 } else { 1 };
    // Every event since the window filled is prompted: in the sent digest's text, or by a task of its
    // own (a new digest or an instant prompt) that is still to go out.
    let later: Vec<_> = fifth.tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(
        prompted_in_digest + later.len(),
        2,
        "the 4th and 5th events are each prompted once: sent digest text {texts:?}, digest count now {:?}, \
         5th event's own tasks {later:?}",
        sent.digest_count
    );
    assert_eq!(sent.digest_count, Some(prompted_in_digest as u32), "the sent digest counts what its text said");
}
