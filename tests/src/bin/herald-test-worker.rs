//! A separate worker process for the multi-process reference cases P1 and P2.
//!
//! `herald-test-worker DATABASE_URL PUSH_URL SMS_URL WORKER_ID LEASE_MS TIMEOUT_MS`
//!
//! Runs Herald's worker cycle against the database clock until one cycle did something, prints one
//! `REPORT …` line per report, and exits. It prints `READY` once connected, so the parent knows when
//! the process is up; the parent kills, stops and continues it with real signals.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use herald_app::worker::{Worker, WorkerConfig};
use herald_channels::registry::HttpChannelRegistry;
use herald_domain::Millis;
use herald_postgres::PgStore;
use herald_tests::world::{default_configs_for_urls, test_keyring};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, push, sms, id, lease_ms, timeout_ms] = args.as_slice() else {
        anyhow::bail!("usage: herald-test-worker DATABASE_URL PUSH_URL SMS_URL WORKER_ID LEASE_MS TIMEOUT_MS");
    };
    let store = Arc::new(PgStore::connect(db, 4).await?);
    let mut configs = default_configs_for_urls(push, sms, "http://127.0.0.1:9");
    for config in &mut configs {
        config.timeout_ms = timeout_ms.parse()?;
    }
    let registry = Arc::new(HttpChannelRegistry::from_configs(&configs)?);
    let worker = Worker::new(
        store.clone(),
        registry,
        Arc::new(test_keyring()),
        Arc::new(store.clock()),
        WorkerConfig {
            id: id.clone(),
            lease: Millis(lease_ms.parse()?),
            batch: 1,
            idle_poll: Duration::from_millis(20),
        },
    );
    println!("READY");
    std::io::stdout().flush()?;
    loop {
        let cycle = worker.run_once().await?;
        if !cycle.is_empty() {
            for report in cycle {
                println!("REPORT {report:?}");
            }
            std::io::stdout().flush()?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
