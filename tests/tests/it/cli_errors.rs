//! What `herald` says when its database is not there or not ready: the real binary, its standard error
//! and exit status. Each message names the server (never its password), the real cause once, and the
//! usual fix; an unmigrated database is refused instead of served.

use std::process::{Command, Output};

use herald_tests::bins::binary;
use herald_tests::db::server_url;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _};

fn herald(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary("herald"));
    command.args(args).env_remove("HERALD_CONFIG").env_remove("DATABASE_URL");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the herald binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn a_server_that_refuses_connections_is_named_without_its_password() {
    let port = closed_port();
    let url = format!("postgres://herald:s3cret-pw@127.0.0.1:{port}/herald");
    let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", &url)]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("postgres://herald@127.0.0.1:{port}/herald")), "names the server: {text}");
    assert!(!text.contains("s3cret-pw"), "never the password: {text}");
    assert!(text.contains("refused"), "the real cause: {text}");
    assert_eq!(text.matches("refused").count(), 1, "the cause once: {text}");
    assert!(text.contains("ensure-postgres"), "the usual fix: {text}");
    assert!(!text.contains("pool timed out"), "{text}");
}

/// `herald migrate` creates a database that does not exist when its role may create databases, says so,
/// and migrates it (`herald init`'s URL names one that a fresh server does not have).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_creates_a_missing_database_when_the_role_may() {
    let options: PgConnectOptions = server_url().parse().expect("DATABASE_URL");
    let name = format!("herald_t_{}_created", std::process::id());
    let mut admin = sqlx::PgConnection::connect_with(&options).await.expect("the test server answers");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop");
    let url = options.clone().database(&name).to_url_lossy().to_string();

    let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", &url)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains(&format!("created database {name} on postgres://")), "{text}");
    assert!(text.contains("migrations applied"), "{text}");
    assert!(migrated(&url).await, "created and migrated");

    // Again: it exists now, nothing is created.
    let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", &url)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(!text.contains("created database"), "{text}");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop");
}

/// A role that may not create databases is told the exact command that creates the missing one; `herald
/// serve` on a missing database says that `herald migrate` creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_the_role_may_not_create_is_named_with_the_command() {
    let options: PgConnectOptions = server_url().parse().expect("DATABASE_URL");
    let role = format!("herald_t_{}_nocreate", std::process::id());
    let name = format!("herald_no_such_db_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect_with(&options).await.expect("the test server answers");
    sqlx::query(&format!("DROP ROLE IF EXISTS {role}")).execute(&mut admin).await.expect("drop role");
    sqlx::query(&format!("CREATE ROLE {role} LOGIN NOCREATEDB NOSUPERUSER")).execute(&mut admin).await.expect("role");
    let url = options.clone().username(&role).database(&name).to_url_lossy().to_string();

    let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", &url)]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("database {name} does not exist")), "names the database: {text}");
    assert!(text.contains(&format!("the role {role} may not create databases")), "the cause: {text}");
    let command = format!("createdb -h {} -p {} -U postgres -O {role} {name}", options.get_host(), options.get_port());
    assert!(text.contains(&command), "the exact command ({command}): {text}");
    assert_eq!(text.matches("database.url").count(), 1, "the key once: {text}");

    let env = [
        ("HERALD__DATABASE__URL", url.as_str()),
        ("HERALD__KEYS__CURRENT", "k1"),
        ("HERALD__KEYS__K1", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="),
    ];
    let out = herald(&["worker"], &env);
    sqlx::query(&format!("DROP ROLE IF EXISTS {role}")).execute(&mut admin).await.expect("drop role");
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(text.matches("does not exist").count(), 1, "the cause once: {text}");
    assert!(text.contains("`herald migrate` creates it"), "the fix: {text}");
    assert_eq!(text.matches("database.url").count(), 1, "the key once: {text}");
}

/// PostgreSQL's maintenance database is refused by `herald migrate` (and `serve --migrate`) unless
/// `--force`: the refusal comes before any connection (the server here does not even listen), and
/// `--force` goes past it to the connection.
#[test]
fn migrating_into_the_maintenance_database_needs_force() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
    let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", &url)]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "a configuration error: {text}");
    assert!(text.contains("database.url: names `postgres`"), "{text}");
    assert!(text.contains("herald migrate --force"), "{text}");
    assert!(!text.contains("refused"), "no connection was tried: {text}");

    let out = herald(&["migrate", "--force"], &[("HERALD__DATABASE__URL", &url)]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused"), "--force went on to connect: {text}");
}

/// A URL that is not PostgreSQL's is refused at start-up naming the key once, with the near scheme when
/// there is one; never with the URL's password.
#[test]
fn a_database_url_that_is_not_postgresql_is_refused_naming_the_key_once() {
    for (url, part) in [
        ("postgress://herald:s3cret-pw@127.0.0.1/herald", "did you mean `postgres://`?"),
        ("mysql://herald:s3cret-pw@127.0.0.1/herald", "`mysql://` is not a PostgreSQL URL"),
        ("postgres://herald:s3cret-pw@127.0.0.1:port/herald", "is not a valid PostgreSQL URL"),
    ] {
        let out = herald(&["migrate"], &[("HERALD__DATABASE__URL", url)]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {text}");
        assert!(text.contains(part), "{url}: {text}");
        assert_eq!(text.matches("database.url").count(), 1, "the key once: {text}");
        assert!(!text.contains("s3cret-pw"), "never the password: {text}");
    }
}

/// `herald serve` and `herald worker` refuse an unmigrated database (they used to start and log a
/// warning every few seconds); `--migrate` migrates it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_database_is_refused_unless_asked_to_migrate() {
    let options: PgConnectOptions = server_url().parse().expect("DATABASE_URL");
    let name = format!("herald_t_{}_unmigrated", std::process::id());
    let mut admin = sqlx::PgConnection::connect_with(&options).await.expect("the test server answers");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create");
    let url = options.clone().database(&name).to_url_lossy().to_string();
    let env = [
        ("HERALD__DATABASE__URL", url.as_str()),
        ("HERALD__KEYS__CURRENT", "k1"),
        ("HERALD__KEYS__K1", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="),
        ("HERALD__WORKER__CONCURRENCY", "1"),
        ("HERALD__AUTH__SERVICE_TOKENS", "a-service-token-for-this-test-only"),
        ("HERALD__AUTH__ADMIN_TOKENS", "an-admin-token-for-this-test-only"),
        ("HERALD__AUTH__USER_TOKEN_SECRET", "a-user-token-secret-for-this-test"),
        ("HERALD__SERVER__LISTEN", "127.0.0.1:0"),
    ];
    for command in ["serve", "worker"] {
        let out = herald(&[command], &env);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{command}: {text}");
        assert!(text.contains("not migrated") && text.contains("herald migrate"), "{command}: {text}");
        assert!(text.contains(&format!("herald {command} --migrate")), "{command}: {text}");
    }
    assert!(!migrated(&url).await, "the refusal wrote nothing");

    let mut child = tokio::process::Command::new(binary("herald"))
        .args(["worker", "--migrate"])
        .env_remove("HERALD_CONFIG")
        .envs(env)
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("herald worker --migrate starts");
    herald_tests::wait::wait_until("the migrations of herald worker --migrate", || migrated(&url)).await;
    // Its clean stop is tested with the worker CLI; here only its start-up mattered.
    child.kill().await.expect("stopped");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop");
}

/// Whether the database at `url` has Herald's migrations table.
async fn migrated(url: &str) -> bool {
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else { return false };
    sqlx::query_scalar::<_, bool>("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(false)
}
