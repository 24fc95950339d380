//! `herald demo` end to end against the test server (`DATABASE_URL`): its scripted mix must end as the
//! scenario table says, with no user prompted twice.

use futures::FutureExt as _;
use herald_demo::scenario::{self, Ch, End, CASES};
use herald_demo::{self as demo, DemoOptions, Server};
use secrecy::SecretString;
use sqlx::Connection as _;

#[tokio::test]
async fn the_demo_mix_ends_as_its_scenario_table_says() {
    let database = format!("herald_demo_it_{}", std::process::id());
    let mut options = DemoOptions::new(Server::Url(SecretString::from(herald_tests::db::server_url())));
    options.database.clone_from(&database);
    options.listen = "127.0.0.1:0".parse().unwrap();
    options.spare_standins = None;
    options.exit = true;
    options.progress = false;
    options.metrics = false;
    let report = demo::run(options).await.expect("the demo runs");

    assert!(report.drained, "every task settled");
    let unexpected: Vec<_> = report.cases.iter().filter(|c| !c.ok).collect();
    assert!(unexpected.is_empty(), "cases not as the table expects: {unexpected:#?}");
    assert_eq!(report.cases.len(), CASES.len());

    // Logical dedup: duplicates answered with the first notification and wrote no row.
    let s = &report.submitted;
    let distinct = scenario::USERS + scenario::FAN_OUT + 1 + CASES.len();
    assert_eq!(report.notification_rows, distinct as u64);
    assert_eq!(s.notifications.len(), distinct);
    assert_eq!(s.duplicates, (scenario::DUPLICATES + scenario::FAN_OUT) as u64);
    assert_eq!(s.duplicates_same_id, s.duplicates);
    assert_eq!(s.fan_out_repeat, (200, 0));
    assert_eq!(s.in_app.as_ref().map(|(_, tasks)| *tasks), Some(0), "the in-app-only user has no task");
    assert_eq!(s.invalid_status, 422);
    assert_eq!(report.task_rows, s.tasks);

    // External duplication: nobody prompted twice; every real send is a SENT task or a parked one whose
    // call the channel accepted before its answer was lost (each parked case was accepted once).
    for ch in Ch::ALL {
        let line = report.channel(ch);
        assert_eq!(line.unsettled, 0, "{}", line.channel);
        assert_eq!(line.extra_sends, 0, "{}: a user was prompted twice", line.channel);
        let parked_cases = CASES.iter().filter(|c| c.channel == ch && c.end == End::Parked).count() as u64;
        assert_eq!(line.parked, parked_cases, "{}", line.channel);
        assert_eq!(line.real_sends, line.sent + line.parked, "{}", line.channel);
    }
    let push = report.channel(Ch::Push);
    assert!(push.requests > push.real_sends, "the push replay was a request without a send");

    // The Miaotixing timeout is parked and listed for review.
    let (index, _) = CASES.iter().enumerate().find(|(_, c)| c.id == "miao-late").expect("case");
    assert_eq!(report.cases[index].end, Some(End::Parked));
    assert!(report.parked.contains(&report.cases[index].task_id));
    assert_eq!(report.parked.len(), CASES.iter().filter(|c| c.end == End::Parked).count());

    // E-mail: accepted with the server's queue id; no reply to the final "." is parked, never resent.
    let case = |id: &str| {
        let (index, _) = CASES.iter().enumerate().find(|(_, c)| c.id == id).expect("case");
        &report.cases[index]
    };
    assert_eq!((case("email-accepted").end, case("email-accepted").sends), (Some(End::Sent), 1));
    assert_eq!(case("email-late").end, Some(End::Parked));
    assert_eq!(case("email-late").outcomes, ["TIMEOUT"]);
    assert_eq!(case("email-late").sends, 1, "the server took the message whose reply was lost");
    assert!(report.parked.contains(&case("email-late").task_id));
    assert!(report.channel(Ch::Email).real_sends > 1, "background users have e-mail too");
    // Web Push: accepted after VAPID was verified and the payload decrypted; 410 switches the channel off.
    assert_eq!((case("webpush-accepted").end, case("webpush-accepted").sends), (Some(End::Sent), 1));
    assert_eq!(report.webpush_payloads.len() as u64, report.channel(Ch::WebPush).real_sends);
    for payload in &report.webpush_payloads {
        let value: serde_json::Value = serde_json::from_str(payload).expect("a decrypted JSON payload");
        assert!(value["text"].as_str().is_some_and(|t| !t.is_empty()), "{payload}");
    }
    let gone = case("webpush-gone");
    assert_eq!((gone.end, gone.sends, gone.expired), (Some(End::Failed), 0, true), "{gone:?}");
    assert!(!case("webpush-accepted").expired);
    assert_eq!(case("webpush-late").end, Some(End::Parked));

    let mut conn = sqlx::PgConnection::connect(&herald_tests::db::server_url()).await.expect("server");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).execute(&mut conn).await.expect("drop");
}

/// With nothing configured, the demo uses the server the tests use: one rule (`scripts/ensure-postgres.sh`)
/// for both — `DATABASE_URL` when set, else 127.0.0.1:5432 when it answers, else the private cluster.
#[tokio::test]
async fn the_demo_finds_the_server_the_tests_use() {
    let found = herald_demo::postgres::find(None).await.expect("a server");
    let ours: sqlx::postgres::PgConnectOptions = herald_tests::db::server_url().parse().expect("the test server");
    let theirs: sqlx::postgres::PgConnectOptions = found.url.parse().expect("the demo's server");
    assert_eq!(
        (theirs.get_host(), theirs.get_port()),
        (ours.get_host(), ours.get_port()),
        "the demo chose {} ({})",
        found.which,
        found.url
    );
    assert!(
        found.which == "DATABASE_URL" || found.which.starts_with("the server at ") || found.is_private(),
        "it says which: {}",
        found.which
    );
}

/// The demo's private PostgreSQL (the project's one, `scripts/ensure-postgres.sh`) is checked before it
/// is reused: a cluster whose server died (killed, leaving its pid file) is started again, and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_private_cluster_is_restarted_not_trusted() {
    let base = std::env::temp_dir().join(format!("herald-pg-restart-{}", std::process::id()));
    let first = herald_demo::postgres::ensure(Some(&base)).await.expect("a private cluster starts");
    let answers = |url: String| async move {
        match sqlx::PgConnection::connect(&url).await {
            Ok(conn) => conn.close().await.is_ok(),
            Err(_) => false,
        }
    };
    assert!(answers(first.url("postgres")).await, "it answers");

    // Kill the server the hard way: its pid file stays behind, claiming a server that is gone.
    let pid_file = std::fs::read_dir(&base)
        .expect("cluster folder")
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("data").join("postmaster.pid"))
        .find(|path| path.is_file())
        .expect("postmaster.pid");
    let pid: i32 =
        std::fs::read_to_string(&pid_file).expect("pid file").lines().next().expect("pid").parse().expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    herald_tests::wait::wait_until("the killed server to stop answering", || {
        answers(first.url("postgres")).map(|a| !a)
    })
    .await;
    assert!(pid_file.is_file(), "the stale pid file is still there");

    let second = herald_demo::postgres::ensure(Some(&base)).await.expect("restarted");
    assert!(answers(second.url("postgres")).await, "it answers again");

    // `herald demo --stop-postgres` stops it and says so (the script's messages used to be swallowed).
    let _ = herald_tests::bins::binary("herald-demo");
    let stop = |base: std::path::PathBuf| async move {
        let out = tokio::process::Command::new(herald_tests::bins::binary("herald"))
            .args(["demo", "--stop-postgres", "--data-dir"])
            .arg(&base)
            .output()
            .await
            .expect("herald demo --stop-postgres runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = stop(base.clone()).await;
    assert!(said.contains("stopped the private cluster in"), "{said}");
    assert!(!answers(second.url("postgres")).await, "stopped");
    let said = stop(base.clone()).await;
    assert!(said.contains("is not running"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}
