//! Real `herald serve` and `herald worker` processes: the API has a pool of its own, so requests that hold
//! every API connection do not stop deliveries, `herald worker` serves its own `/metrics`, and a
//! `herald worker` on one runtime thread delivers and stops as the default one does, and an API-only
//! `herald serve` (`--no-worker`, `[worker] enabled = false`) takes submissions that `herald worker` delivers.

use std::process::Stdio;

use herald_channels::cipher::Keyring;
use herald_channels::config::ChannelConfig;
use herald_domain::{ChannelKind, ChannelName, EventKey, Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::store::{ChannelTable, NewNotification};
use herald_ports::Clock as _;
use herald_standin::{Kind, StandIn};
use herald_tests::wait::wait_until;
use secrecy::SecretString;
use sqlx::Connection as _;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const SERVICE: &str = "a-service-token-of-at-least-32-bytes-0001";
const ADMIN: &str = "an-admin-token-of-at-least-32-bytes-00002";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("address").port()
}

fn notification(user: &str, key: &str) -> NewNotification {
    NewNotification {
        user_id: UserId::from(user),
        event_key: EventKey::from(key),
        body: "Your order has shipped".into(),
        ttl: Millis(600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    }
}

struct Setup {
    db: herald_tests::TestDb,
    push: StandIn,
    table: ChannelTable,
    dir: std::path::PathBuf,
}

async fn setup(name: &str, users: &[&str]) -> Setup {
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let push = StandIn::start(Kind::Push).await;
    let keyring = Keyring::new([("k1".to_owned(), SecretString::from(KEY))], "k1").expect("key");
    let channel = ChannelName::from("push");
    for user in users {
        let user = UserId::from(*user);
        let stored = herald_ports::DestinationCipher::encrypt(
            &keyring,
            &user,
            &channel,
            &SecretString::from(format!("dest-{user}")),
        )
        .expect("encrypt");
        db.store.put(&user, &channel, true, Some(stored)).await.expect("preference");
    }
    let mut rules = ChannelConfig::new("push", ChannelKind::Webhook, push.base_url());
    rules.timeout_ms = 1000;
    let table = ChannelTable(vec![(channel, rules.rules())]);
    let dir = std::env::temp_dir().join(format!("herald-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    Setup { db, push, table, dir }
}

fn spawn(setup: &Setup, command: &str, port: u16, extra: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    let config = setup.dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\napi_max_connections = 1\nworker_max_connections = 1\n\
             [server]\nlisten = \"127.0.0.1:{port}\"\n\
             [auth]\nservice_tokens = [\"{SERVICE}\"]\nadmin_tokens = [\"{ADMIN}\"]\n\
             user_token_secret = \"a-user-token-secret-of-some-length\"\n\
             [keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n\
             [worker]\nlease_ms = 5000\npoll_ms = 100\n{extra}\n\
             [log]\nlevel = \"warn\"\n\
             [[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"{}\"\ntimeout_ms = 1000\n",
            setup.db.url,
            setup.push.base_url()
        ),
    )
    .expect("config file");
    tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .args(command.split_whitespace())
        .env_remove("HERALD_CONFIG")
        .envs(env.iter().copied())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("herald starts")
}

async fn answers(url: &str) -> Option<String> {
    let response = reqwest::get(url).await.ok()?;
    if response.status().is_success() {
        response.text().await.ok()
    } else {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_holding_every_api_connection_do_not_stop_deliveries() {
    let setup = setup("pools", &["alice", "bob"]).await;
    let port = free_port();
    let _serve = spawn(&setup, "serve", port, "concurrency = 1", &[]);
    let base = format!("http://127.0.0.1:{port}");
    wait_until("herald serve to answer", || async { answers(&format!("{base}/healthz")).await.is_some() }).await;

    // The test's own transaction holds alice's event key: a submit of the same key waits on it, holding
    // the API's only connection.
    let mut blocker = sqlx::PgConnection::connect(&setup.db.url).await.expect("connect");
    sqlx::query("BEGIN").execute(&mut blocker).await.expect("begin");
    sqlx::query(
        "INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
         VALUES ('alice', 'held', 'x', now(), now() + interval '1 hour')",
    )
    .execute(&mut blocker)
    .await
    .expect("insert");
    let submit = tokio::spawn({
        let url = format!("{base}/v1/notifications");
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(SERVICE)
                .json(&serde_json::json!({"user_id": "alice", "event_key": "held", "body": "b", "ttl_seconds": 60}))
                .send()
                .await
                .map(|r| r.status())
        }
    });
    let store = setup.db.store.clone();
    wait_until("the submit to wait on the held key", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(store.pool())
        .await
        .expect("pg_stat_activity");
        waiting >= 1
    })
    .await;

    // Meanwhile a delivery for bob goes out: the workers' pool is not the API's.
    let now = store.clock().now().await.expect("clock");
    let created = store.create(&notification("bob", "order-1"), &setup.table, now).await.expect("create");
    wait_until("bob's task to be SENT while the API's connection is held", || async {
        let view = store.notification(created.notification_id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent))
    })
    .await;

    sqlx::query("ROLLBACK").execute(&mut blocker).await.expect("rollback");
    let status = submit.await.expect("submit task").expect("answered");
    assert_eq!(status.as_u16(), 201, "the held submit completes once the key is free");
    let _ = std::fs::remove_dir_all(&setup.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_worker_serves_its_own_metrics() {
    let setup = setup("worker-metrics", &["carol"]).await;
    let port = free_port();
    let _worker =
        spawn(&setup, "worker", free_port(), &format!("concurrency = 1\nmetrics_listen = \"127.0.0.1:{port}\""), &[]);
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    wait_until("herald worker to serve /metrics", || async { answers(&metrics).await.is_some() }).await;

    let store = setup.db.store.clone();
    let now = store.clock().now().await.expect("clock");
    let created = store.create(&notification("carol", "order-2"), &setup.table, now).await.expect("create");
    wait_until("the task to be SENT by herald worker", || async {
        let view = store.notification(created.notification_id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent))
    })
    .await;
    let line = "herald_attempts_total{channel=\"push\",outcome=\"ACCEPTED\"} 1";
    wait_until("the worker's own counter in its scrape", || async {
        answers(&metrics).await.is_some_and(|text| text.contains(line))
    })
    .await;
    let text = answers(&metrics).await.expect("scrape");
    assert!(!text.contains("dest-carol"), "no destination in the metrics");
    let _ = std::fs::remove_dir_all(&setup.dir);
}

/// `TOKIO_WORKER_THREADS=1` (README, "Workers in production"): the worker's loop, its finish flushers, its
/// HTTP connections and its wake-up listener all share one runtime thread. It delivers a backlog with
/// several calls in flight, takes new work from a wake-up, and stops on SIGTERM with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herald_worker_on_one_runtime_thread_delivers_and_stops_cleanly() {
    let users = ["dana", "erin", "frank", "gale"];
    let setup = setup("worker-one-thread", &users).await;
    let store = setup.db.store.clone();
    let now = store.clock().now().await.expect("clock");
    let mut created = Vec::new();
    for (i, user) in users.iter().cycle().take(24).enumerate() {
        let key = format!("order-{i}");
        created.push(store.create(&notification(user, &key), &setup.table, now).await.expect("create").notification_id);
    }
    let mut worker =
        spawn(&setup, "worker", free_port(), "concurrency = 8\nbatch = 4", &[("TOKIO_WORKER_THREADS", "1")]);
    let all_sent = |ids: Vec<_>| {
        let store = store.clone();
        async move {
            for id in ids {
                let view = store.notification(id).await.ok().flatten();
                if !view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent)) {
                    return false;
                }
            }
            true
        }
    };
    wait_until("the backlog to be SENT by a single-threaded herald worker", || all_sent(created.clone())).await;

    // New work after the backlog: the worker is idle, so this one comes through LISTEN/NOTIFY (or the poll).
    let now = store.clock().now().await.expect("clock");
    let late = store.create(&notification("dana", "order-late"), &setup.table, now).await.expect("create");
    wait_until("the late notification to be SENT", || all_sent(vec![late.notification_id])).await;
    assert_eq!(setup.push.requests(), 25, "one call per notification, none repeated");

    let pid = worker.id().expect("running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), worker.wait())
        .await
        .expect("the worker stops within its lease")
        .expect("exit status");
    assert!(status.success(), "a clean stop on SIGTERM: {status}");
    let _ = std::fs::remove_dir_all(&setup.dir);
}

/// Submission and delivery scale apart: `herald serve --no-worker` and a `herald serve` with
/// `[worker] enabled = false` answer the API but never call a channel; the notification they took is
/// delivered by a `herald worker` started afterwards, once. `herald worker` refuses `enabled = false`,
/// naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_only_serve_takes_submissions_and_herald_worker_delivers_them() {
    let setup = setup("api-only", &["hana", "ivan"]).await;
    let submit = |port: u16, user: &'static str| async move {
        let response = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/v1/notifications"))
            .bearer_auth(SERVICE)
            .json(&serde_json::json!({"user_id": user, "event_key": "order-1", "body": "b", "ttl_seconds": 600}))
            .send()
            .await
            .expect("submit");
        assert_eq!(response.status().as_u16(), 201, "the API-only process takes the submission");
        let body: serde_json::Value = response.json().await.expect("json");
        body["notification_id"].as_str().expect("the notification's id").to_owned()
    };
    let (flag_port, config_port) = (free_port(), free_port());
    let _flagged = spawn(&setup, "serve --no-worker", flag_port, "", &[]);
    wait_until("herald serve --no-worker to answer", || async {
        answers(&format!("http://127.0.0.1:{flag_port}/healthz")).await.is_some()
    })
    .await;
    let _configured = spawn(&setup, "serve", config_port, "enabled = false", &[]);
    wait_until("herald serve with worker.enabled = false to answer", || async {
        answers(&format!("http://127.0.0.1:{config_port}/healthz")).await.is_some()
    })
    .await;
    let ids = [submit(flag_port, "hana").await, submit(config_port, "ivan").await];

    let states = |ids: [String; 2]| {
        let client = reqwest::Client::new();
        async move {
            let mut states = Vec::new();
            for id in ids {
                let view: serde_json::Value = client
                    .get(format!("http://127.0.0.1:{flag_port}/v1/notifications/{id}"))
                    .bearer_auth(SERVICE)
                    .send()
                    .await
                    .expect("read")
                    .json()
                    .await
                    .expect("json");
                let tasks = view["tasks"].as_array().cloned().unwrap_or_default();
                states.extend(tasks.iter().map(|t| t["state"].as_str().unwrap_or_default().to_owned()));
            }
            states
        }
    };
    // Fifteen poll intervals (poll_ms = 100) with due work and no wake-up needed: a process with a worker
    // would have delivered both (the test above shows `herald serve` delivering).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(setup.push.requests(), 0, "an API-only process called a channel");
    assert_eq!(states(ids.clone()).await, ["PENDING", "PENDING"], "both tasks wait for a worker");

    let _worker = spawn(&setup, "worker", free_port(), "concurrency = 2", &[]);
    wait_until("herald worker to deliver what the API-only processes took", || async {
        states(ids.clone()).await == ["SENT", "SENT"]
    })
    .await;
    assert_eq!(setup.push.requests(), 2, "one call per notification");

    // `herald worker` with the switch off would run nothing: refused, naming the key.
    let config = setup.dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n[worker]\nenabled = false\n\
             [[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"{}\"\ntimeout_ms = 1000\n",
            setup.db.url,
            setup.push.base_url()
        ),
    )
    .expect("config file");
    let refused = tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .env_remove("HERALD_CONFIG")
        .output()
        .await
        .expect("herald worker runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "herald worker with worker.enabled = false must not start");
    assert!(stderr.contains("worker.enabled"), "the error names the key: {stderr}");
    let _ = std::fs::remove_dir_all(&setup.dir);
}
