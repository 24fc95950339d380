//! The test run leaves nothing on the server: `scripts/test.sh` ends with `herald-test-db
//! drop-leftovers`, which drops the databases of test processes that have exited (and the template once no
//! test process runs). Here: a database left by a process that no longer exists is dropped, while this
//! running process's own database is kept.

use herald_tests::db::{drop_leftovers, server_url, TestDb};
use sqlx::Connection as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_of_finished_test_processes_are_dropped() {
    let mine = TestDb::fresh().await.expect("a database of this process");
    let mut admin = sqlx::PgConnection::connect(&server_url()).await.expect("server");
    // No process has this id (above the kernel's pid limit).
    let left = "herald_t_4000000000_0";
    sqlx::query(&format!("DROP DATABASE IF EXISTS {left}")).execute(&mut admin).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {left}")).execute(&mut admin).await.expect("create");

    let dropped = drop_leftovers().await.expect("clean-up");
    assert!(dropped.contains(&left.to_owned()), "{dropped:?}");
    let exists = |name: String| {
        let url = server_url();
        async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("server");
            sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(name)
                .fetch_one(&mut conn)
                .await
                .expect("query")
        }
    };
    assert!(!exists(left.to_owned()).await, "the leftover is gone");
    assert!(exists(mine.name.clone()).await, "a running test's database is kept");
}
