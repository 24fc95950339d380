//! `herald worker` as an operator runs it: the real binary with a configuration file, a real PostgreSQL
//! and a stand-in channel. A task created after start-up is sent although the poll interval is an hour
//! (the NOTIFY wake-up), the JSON log format holds for every line, and SIGTERM ends the process cleanly.

use std::sync::{Arc, Mutex};

use herald_channels::cipher::Keyring;
use herald_channels::config::ChannelConfig;
use herald_domain::{ChannelKind, ChannelName, EventKey, Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::store::{ChannelTable, NewNotification};
use herald_ports::Clock as _;
use herald_standin::{Kind, StandIn};
use herald_tests::wait::{wait_until, SAFETY};
use secrecy::SecretString;
use tokio::io::AsyncBufReadExt as _;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const DESTINATION: &str = "dest-worker-cli-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_worker_wakes_on_new_work_logs_json_and_stops_on_sigterm() {
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let (url, store) = (db.url.clone(), db.store.clone());
    let push = StandIn::start(Kind::Push).await;
    let keyring = Keyring::new([("k1".to_owned(), SecretString::from(KEY))], "k1").expect("key");
    let (user, channel) = (UserId::from("alice"), ChannelName::from("push"));
    let stored = herald_ports::DestinationCipher::encrypt(&keyring, &user, &channel, &SecretString::from(DESTINATION))
        .expect("encrypt");
    store.put(&user, &channel, true, Some(stored)).await.expect("preference");

    let dir = std::env::temp_dir().join(format!("herald-worker-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{url}\"\n[keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n\
             [worker]\nconcurrency = 1\nlease_ms = 5000\npoll_ms = 3600000\n\
             [log]\nformat = \"json\"\nlevel = \"herald_core::worker=trace,info\"\n\
             [[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"{}\"\ntimeout_ms = 1000\n",
            push.base_url()
        ),
    )
    .expect("config file");

    let mut child = tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .env_remove("HERALD_CONFIG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("herald worker starts");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = tokio::spawn({
        let lines = Arc::clone(&lines);
        let stderr = child.stderr.take().expect("stderr");
        async move {
            let mut stderr = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = stderr.next_line().await {
                lines.lock().expect("lines").push(line);
            }
        }
    });
    let logged = |text: &str| lines.lock().expect("lines").iter().any(|l| l.contains(text));
    // The listener is up before the loop starts; once the loop says it is idle, only a wake-up (or the
    // hour-long poll) can start its next cycle.
    wait_until("the worker loop to be idle", || async { logged("idle: waiting for a wake-up") }).await;

    let mut rules = ChannelConfig::new("push", ChannelKind::Webhook, push.base_url());
    rules.timeout_ms = 1000;
    let table = ChannelTable(vec![(channel.clone(), rules.rules())]);
    let new = NewNotification {
        user_id: user.clone(),
        event_key: EventKey::from("order-cli"),
        body: "Your order has shipped".into(),
        ttl: Millis(600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    };
    let now = store.clock().now().await.expect("clock");
    let created = store.create(&new, &table, now).await.expect("create");
    wait_until("the task to be SENT by the worker process", || async {
        let view = store.notification(created.notification_id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent))
    })
    .await;
    assert_eq!(push.sends(), 1, "sent once, woken by the notification (the poll interval is an hour)");

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(SAFETY, child.wait()).await.expect("exits after SIGTERM").expect("status");
    reader.await.expect("stderr read");
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");

    let lines = lines.lock().expect("lines").clone();
    assert!(lines.iter().any(|l| l.contains("shutdown requested")), "{lines:#?}");
    for line in &lines {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok_and(|v| v.is_object()), "every log line is a JSON object: {line}");
        assert!(!line.contains(DESTINATION), "the destination never appears in the log: {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
