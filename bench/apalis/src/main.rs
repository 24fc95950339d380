//! The apalis-postgres peer of `scripts/bench.sh`: pushes N no-op jobs into its own database, then drains
//! them with one worker; prints `draining` when the clock starts and `drained N jobs in S s` at the end
//! (the lines `herald-bench` reads).
//!
//!   apalis-bench DATABASE_URL JOBS BATCH CONCURRENCY

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_postgres::{Config, PgPool, PostgresStorage};
use futures::stream::{self, StreamExt};

async fn noop(_job: u64) -> Result<(), BoxDynError> {
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxDynError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, jobs, batch, concurrency] = args.as_slice() else {
        return Err("usage: apalis-bench DATABASE_URL JOBS BATCH CONCURRENCY".into());
    };
    let (jobs, batch, concurrency): (u64, usize, usize) = (jobs.parse()?, batch.parse()?, concurrency.parse()?);
    let pool = PgPool::connect(url).await?;
    PostgresStorage::setup(&pool).await?;
    let config = Config::default().queue("bench").batch_size(batch);
    let mut backend = PostgresStorage::new(&pool).with_config(config.clone());
    let mut items = stream::iter((0..jobs).map(|n| TaskBuilder::new(n).build())).boxed();
    backend.push_all(&mut items).await?;
    let pending: i64 = sqlx_count(&pool, "SELECT count(*) FROM apalis.jobs WHERE status = 'Pending'").await?;
    eprintln!("apalis: {pending} jobs pending");

    let backend = PostgresStorage::new(&pool).with_config(config);
    let worker = WorkerBuilder::new("bench-worker")
        .backend(backend)
        .concurrency(concurrency)
        .parallelize(tokio::spawn)
        .build(noop);
    // herald-bench measures the CPU from this line on.
    println!("draining");
    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let deadline = started + Duration::from_secs(600);
    let watch = async {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let n = sqlx_count(&pool, "SELECT count(*) FROM apalis.jobs WHERE status = 'Done'").await?;
            done.store(usize::try_from(n)?, Ordering::Relaxed);
            if u64::try_from(n)? >= jobs || Instant::now() > deadline {
                return Ok::<(), BoxDynError>(());
            }
        }
    };
    tokio::select! {
        finished = watch => finished?,
        ran = worker.run() => ran?,
    }
    let secs = started.elapsed().as_secs_f64();
    println!("drained {} jobs in {secs:.3} s", done.load(Ordering::Relaxed));
    Ok(())
}

async fn sqlx_count(pool: &PgPool, query: &'static str) -> Result<i64, BoxDynError> {
    let row: (i64,) = sqlx::query_as(query).fetch_one(pool).await?;
    Ok(row.0)
}
