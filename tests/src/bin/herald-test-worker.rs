//! A separate worker process for the multi-process cases (P1, P2, the egress interval across processes).
//!
//! `herald-test-worker DATABASE_URL PUSH_URL SMS_URL WORKER_ID LEASE_MS TIMEOUT_MS [OPTIONS]`
//!
//! Runs Herald's worker cycle against the database clock. Without options it stops after the first
//! cycle that did something (what P1 and P2 need: the parent kills, stops and continues it with real
//! signals). Options:
//!
//! * `--miao URL` — the Miaotixing stand-in (default: a closed port);
//! * `--miao-interval-ms N` — the Miaotixing channel's egress interval (default 0);
//! * `--loop-ms N` — keep cycling for up to N ms, stopping early once no task is scheduled any more
//!   (every task terminal or parked), instead of stopping after one busy cycle;
//! * `--batch N` — tasks claimed per transaction (default 1);
//! * `--allow-lease-overlap` — call even when the call could outlive the lease (P2 reproduces that
//!   overlap on purpose; `herald` itself refuses such a configuration).
//!
//! It prints `READY` once connected, one `REPORT …` line per report, and in loop mode `DONE` at the end.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_channels::registry::HttpChannelRegistry;
use herald_core::worker::WorkerConfig;
use herald_core::Services;
use herald_domain::Millis;
use herald_postgres::PgStore;
use herald_tests::world::{default_configs_for_urls, test_keyring};

const USAGE: &str = "usage: herald-test-worker DATABASE_URL PUSH_URL SMS_URL WORKER_ID LEASE_MS TIMEOUT_MS \
                     [--miao URL] [--miao-interval-ms N] [--loop-ms N] [--batch N] [--allow-lease-overlap]";

struct Options {
    miao: String,
    miao_interval_ms: u64,
    loop_ms: Option<u64>,
    batch: u32,
    allow_lease_overlap: bool,
}

fn options(rest: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        miao: "http://127.0.0.1:9".to_owned(),
        miao_interval_ms: 0,
        loop_ms: None,
        batch: 1,
        allow_lease_overlap: false,
    };
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        if flag == "--allow-lease-overlap" {
            options.allow_lease_overlap = true;
            continue;
        }
        let value = rest.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--miao" => options.miao.clone_from(value),
            "--miao-interval-ms" => options.miao_interval_ms = value.parse()?,
            "--loop-ms" => options.loop_ms = Some(value.parse()?),
            "--batch" => options.batch = value.parse()?,
            _ => anyhow::bail!("unknown option {flag}; {USAGE}"),
        }
    }
    Ok(options)
}

fn print_reports(cycle: &[herald_core::worker::Report]) -> std::io::Result<()> {
    for report in cycle {
        println!("REPORT {report:?}");
    }
    std::io::stdout().flush()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() >= 6, USAGE);
    let (positional, rest) = args.split_at(6);
    let [db, push, sms, id, lease_ms, timeout_ms] = positional else {
        anyhow::bail!(USAGE);
    };
    let options = options(rest)?;
    let store = Arc::new(PgStore::connect(db, 4).await?);
    let mut configs = default_configs_for_urls(push, sms, &options.miao);
    for config in &mut configs {
        config.timeout_ms = timeout_ms.parse()?;
        if config.name == "miao" {
            config.min_interval_ms = Some(options.miao_interval_ms);
        }
    }
    let registry = Arc::new(HttpChannelRegistry::from_configs(&configs)?);
    let services = Services::over(store.clone(), registry, Arc::new(test_keyring()), Arc::new(store.clock()));
    let mut worker = services.worker(WorkerConfig {
        id: id.clone(),
        lease: Millis(lease_ms.parse()?),
        batch: options.batch,
        idle_poll: Duration::from_millis(20),
    });
    if options.allow_lease_overlap {
        worker = worker.allowing_lease_overlap();
    }
    println!("READY");
    std::io::stdout().flush()?;
    let Some(loop_ms) = options.loop_ms else {
        loop {
            let cycle = worker.run_once().await?;
            if !cycle.is_empty() {
                print_reports(&cycle)?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(loop_ms);
    while Instant::now() < deadline {
        let cycle = worker.run_once().await?;
        print_reports(&cycle)?;
        if cycle.is_empty() {
            let scheduled: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM delivery_task WHERE next_attempt_at IS NOT NULL)")
                    .fetch_one(store.pool())
                    .await?;
            if !scheduled {
                break;
            }
            // Polling, as `herald worker` does between cycles; the interval keeps the rest deferred.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    println!("DONE");
    std::io::stdout().flush()?;
    Ok(())
}
