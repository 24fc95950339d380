//! A channel kind is one module and one line: the test kind `echo` (herald-channels'
//! `src/kinds/echo.rs` and its line in `kinds!`, compiled under the `test-kind` feature that these tests
//! switch on) is configured in a real `herald` configuration file, and the real binary delivers a
//! notification through it; a setting it refuses is named by its key, and so is a key of another kind.
//! Its own key (`prefix`) is declared by its settings type in that module and nowhere else: the file's
//! value reaches the provider id it answers with.

use herald_channels::cipher::Keyring;
use herald_channels::config::ChannelConfig;
use herald_channels::kinds::echo::Echo;
use herald_channels::kinds::Kind as _;
use herald_domain::{ChannelName, EventKey, Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::store::{ChannelTable, NewNotification};
use herald_ports::Clock as _;
use herald_tests::bins::binary;
use herald_tests::wait::{wait_until, SAFETY};
use secrecy::SecretString;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// A configuration file of `herald` with one `[[channel]]` of kind `echo`, plus `extra` lines in it.
fn config_file(tag: &str, database: &str, extra: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("herald-echo-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("herald.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = \"{database}\"\n[keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n\
             [worker]\nconcurrency = 1\nlease_ms = 10000\npoll_ms = 200\n\
             [[channel]]\nname = \"loop\"\nkind = \"echo\"\n{extra}"
        ),
    )
    .expect("config file");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_is_delivered_through_the_echo_kind_by_the_real_binary() {
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let store = db.store.clone();
    let keyring = Keyring::new([("k1".to_owned(), SecretString::from(KEY))], "k1").expect("key");
    let (user, channel) = (UserId::from("alice"), ChannelName::from("loop"));
    let destination = SecretString::from("anything at all");
    let stored = herald_ports::DestinationCipher::encrypt(&keyring, &user, &channel, &destination).expect("encrypt");
    store.put(&user, &channel, true, Some(stored)).await.expect("preference");

    let config = config_file("deliver", &db.url, "prefix = \"loop\"\n");
    let mut worker = tokio::process::Command::new(binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .env_remove("HERALD_CONFIG")
        .kill_on_drop(true)
        .spawn()
        .expect("herald worker starts");

    let rules = ChannelConfig::new("loop", Echo::KIND, "").rules();
    let table = ChannelTable(vec![(channel.clone(), rules)]);
    let new = NewNotification {
        user_id: user.clone(),
        event_key: EventKey::from("echo-1"),
        body: "Your order has shipped".into(),
        ttl: Millis(600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    };
    let now = store.clock().now().await.expect("clock");
    let created = store.create(&new, &table, now).await.expect("create");
    wait_until("the task to be SENT through the echo channel", || async {
        let view = store.notification(created.notification_id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent))
    })
    .await;
    let view = store.notification(created.notification_id).await.expect("read").expect("the notification");
    let [task] = view.tasks.as_slice() else { panic!("one task: {:?}", view.tasks) };
    assert_eq!(task.channel, channel);
    assert_eq!(task.attempt_count, 1, "{task:?}");
    assert_eq!(
        task.provider_msg_id.as_deref(),
        Some(format!("loop-{}", task.reference).as_str()),
        "the echo kind's own answer with its own `prefix`: the task went through its module and its settings"
    );

    worker.start_kill().expect("kill");
    let _ = tokio::time::timeout(SAFETY, worker.wait()).await;
    let _ = std::fs::remove_dir_all(config.parent().expect("dir"));
}

/// What `herald worker` says of a refused configuration: exit status 2 and the key on standard error.
fn refused(tag: &str, extra: &str, key: &str) {
    let config = config_file(tag, "postgres://postgres@127.0.0.1:5432/unused", extra);
    let out = std::process::Command::new(binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .env_remove("HERALD_CONFIG")
        .output()
        .expect("herald runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(key), "names {key}: {stderr}");
    let _ = std::fs::remove_dir_all(config.parent().expect("dir"));
}

#[test]
fn the_echo_kinds_own_check_and_the_shared_ones_name_the_key() {
    // The kind's own rule, declared in its module.
    refused("own", "digest = { instant_per_hour = 1 }\n", "channel.loop.digest.instant_per_hour");
    // Its own key, read by its settings type and checked by its module; a misspelling of it.
    refused("prefix", "prefix = \"a b\"\n", "channel.loop.prefix");
    refused("misspelt", "prefx = \"loop\"\n", "channel.loop.prefx");
    // The rules every kind gets: another kind's key, a URL the kind does not use.
    refused("other", "host = \"smtp.example.org\"\n", "channel.loop.host");
    refused("url", "url = \"http://127.0.0.1:9\"\n", "channel.loop.url");
    // Negative control: the same entry without them is accepted (the worker starts; no database is needed
    // to get past the configuration, so the failure is the database's, not the key's).
    let config = config_file("good", "postgres://postgres@127.0.0.1:1/unused", "prefix = \"loop\"\n");
    let out = std::process::Command::new(binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .env_remove("HERALD_CONFIG")
        .output()
        .expect("herald runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("configuration"), "an echo entry as such is accepted: {stderr}");
    let _ = std::fs::remove_dir_all(config.parent().expect("dir"));
}
