//! The write account (`herald-bench --account`): what one notification with one channel writes in
//! PostgreSQL, phase by phase — submit, claim, finish — through Herald's own store (`herald-postgres`, the
//! statements the binary runs), each phase on its own and measured from the server: the WAL records it
//! wrote by relation and kind (`pg_walinspect`: every heap tuple, row lock, index entry and commit), the
//! rows by table (`pg_stat_user_tables`), the trigger functions called (`pg_stat_user_functions`), every
//! statement with its time and WAL (`pg_stat_statements`, when the server loads it), and PostgreSQL's CPU.
//!
//! The submit and the claim start after a `CHECKPOINT`, the finish follows the claim as in a drain (which
//! starts after one), so each phase's full-page images are those a drain or a burst of submissions pays;
//! they are counted apart. Each phase ends by closing its pools, so that every backend has reported its
//! statistics and its CPU time. Run it on a server nobody else writes
//! to: the WAL is the whole server's, and is attributed to relations by their file numbers.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use herald_domain::finish::finish;
use herald_domain::{
    ChannelContract, ChannelKind, ChannelName, ChannelRules, EventKey, Jitter, Millis, Observation, Policy,
    QueryConsistency, RefusalProof, RetryPolicy, Timestamp, UserId,
};
use herald_ports::store::{ChannelTable, ClaimRequest, ClaimedTask, FinishRecord, NewNotification};
use herald_ports::{DeliveryStore as _, SubmissionStore as _};
use herald_postgres::PgStore;
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::cpu;

/// Users with the channel enabled; notifications are spread over them.
const USERS: usize = 200;
/// Concurrent submitters (the benchmark's API clients), claimers and finish flushers.
const SUBMITTERS: usize = 32;
const CLAIMERS: usize = 4;
const FLUSHERS: usize = 4;
const BATCH: u32 = 32;

/// One phase's measurements, already per notification where that is meant.
pub struct Phase {
    pub name: &'static str,
    pub notifications: u64,
    pub secs: f64,
    pub postgres_cpu: f64,
    pub wal_bytes: f64,
    pub fpi_bytes: f64,
    /// (relation, resource manager/record type) → (records, bytes without images).
    pub records: BTreeMap<(String, String), (i64, i64)>,
    /// Records with no block of this database (commits, …): kind → (records, bytes).
    pub unattributed: BTreeMap<String, (i64, i64)>,
    /// table → (inserted, updated, of them HOT, deleted).
    pub tables: BTreeMap<String, [i64; 4]>,
    /// trigger function → calls.
    pub functions: BTreeMap<String, i64>,
    /// Statements, largest time first; empty without `pg_stat_statements`.
    pub statements: Vec<Statement>,
    /// Relations and their bytes after the last phase and a `VACUUM` (the last phase only).
    pub sizes: Vec<(String, i64)>,
}

/// One statement's figures over a phase (`pg_stat_statements`).
pub struct Statement {
    pub query: String,
    pub calls: i64,
    pub plans: i64,
    pub rows: i64,
    /// Milliseconds executing, and planning (0 unless `pg_stat_statements.track_planning` is on).
    pub exec_ms: f64,
    pub plan_ms: f64,
    pub wal_bytes: f64,
    pub toplevel: bool,
}

/// A row of `pg_stat_statements` as [`Statement`] holds it.
type StatementRow = (String, i64, i64, i64, f64, f64, f64, bool);

/// Runs the account on a new database of the server of `admin_url`; answers its report in Markdown.
///
/// # Errors
/// When the database cannot be made or a phase fails.
pub async fn run(admin: &PgPool, admin_url: &str, notifications: u64, setup: Option<&str>) -> anyhow::Result<String> {
    let name = format!("bench_account_{}", std::process::id());
    let (url, pool) = crate::database(admin, admin_url, &name).await?;
    let outcome = account(&pool, &url, &name, notifications, setup).await;
    pool.close().await;
    crate::drop_database(admin, &name).await;
    let phases = outcome?;
    Ok(report(&phases))
}

fn channels() -> ChannelTable {
    let rules = ChannelRules {
        contract: ChannelContract::new(
            ChannelKind::Webhook,
            RefusalProof::BeforeAcceptance,
            QueryConsistency::Immediate,
        ),
        retry: RetryPolicy::new(8, Millis(100), Millis(1000)),
        policy: Policy::Safe,
        client_timeout: Millis(10_000),
        min_interval: Millis(0),
        egress_guard: Millis(0),
        digest: None,
    };
    ChannelTable(vec![(ChannelName::from("push"), rules)])
}

async fn account(
    pool: &PgPool,
    url: &str,
    name: &str,
    notifications: u64,
    setup: Option<&str>,
) -> anyhow::Result<Vec<Phase>> {
    sqlx::query(&format!("ALTER DATABASE {name} SET track_functions = 'pl'")).execute(pool).await?;
    let store = PgStore::connect(url, 2).await?;
    store.migrate().await?;
    store.pool().close().await;
    if let Some(setup) = setup {
        sqlx::raw_sql(setup).execute(pool).await.context("the account's --setup SQL")?;
    }
    ensure!(
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect").execute(pool).await.is_ok(),
        "the account needs pg_walinspect (PostgreSQL 15 or later, with its contrib modules)"
    );
    let statements = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(pool).await.is_ok()
        && sqlx::query("SELECT pg_stat_statements_reset()").execute(pool).await.is_ok();
    if !statements {
        eprintln!("herald-bench: pg_stat_statements is not loaded by this server: the account lists no statements");
    }
    sqlx::query(
        "INSERT INTO channel_pref (user_id, channel, enabled, destination) \
         SELECT 'u' || lpad(g::text, 3, '0'), 'push', true, '\\x00112233445566778899'::bytea \
         FROM generate_series(0, $1 - 1) g",
    )
    .bind(i64::try_from(USERS)?)
    .execute(pool)
    .await?;
    let now: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint").fetch_one(pool).await?;
    let channels = channels();

    let mut phases = Vec::new();
    // Submit: SUBMITTERS callers at once, as the API's clients; each submission waits for its answer.
    let submit = measure(pool, "submit", notifications, statements, true, || async {
        let store = PgStore::connect(url, 8).await?;
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let callers = (0..SUBMITTERS).map(|_| {
            let (store, next, channels) = (store.clone(), Arc::clone(&next), channels.clone());
            async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= notifications {
                        return anyhow::Ok(());
                    }
                    let new = NewNotification {
                        user_id: UserId::from(format!("u{:03}", i % USERS as u64).as_str()),
                        event_key: EventKey::from(format!("account-{i}").as_str()),
                        body: "a benchmark notification".into(),
                        ttl: Millis(3_600_000),
                        max_attempts: None,
                        thread_key: None,
                        submitted_by: None,
                    };
                    let created = store.create(&new, &channels, Timestamp::from_millis(now)).await?;
                    ensure!(created.created && created.tasks.len() == 1, "submission {i} wrote no task");
                }
            }
        });
        for r in futures::future::join_all(callers).await {
            r?;
        }
        // The wake-ups go out after the commits, debounced: let the last one go.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        store.pool().close().await;
        Ok(())
    })
    .await?;
    phases.push(submit);

    // Claim: CLAIMERS loops of batches of BATCH until the queue is empty. The backlog is vacuumed and
    // analyzed first, as the benchmark's drains are (an installation's autovacuum does it: migration 0012).
    sqlx::query("VACUUM ANALYZE task_queue").execute(pool).await?;
    sqlx::query("ANALYZE delivery_task").execute(pool).await?;
    let claimed: Arc<Mutex<Vec<ClaimedTask>>> = Arc::default();
    let at = Timestamp::from_millis(now + 1_000);
    let claim = measure(pool, "claim", notifications, statements, true, || async {
        let store = PgStore::connect(url, u32::try_from(CLAIMERS)?).await?;
        let loops = (0..CLAIMERS).map(|w| {
            let (store, channels, claimed) = (store.clone(), channels.clone(), Arc::clone(&claimed));
            async move {
                let request = ClaimRequest {
                    worker: format!("account-worker-{w}"),
                    now: at,
                    lease: Millis(600_000),
                    limit: BATCH,
                    channels,
                };
                loop {
                    let batch = store.claim(&request).await?;
                    if batch.claimed.is_empty() {
                        return anyhow::Ok(());
                    }
                    claimed.lock().await.extend(batch.claimed);
                }
            }
        });
        for r in futures::future::join_all(loops).await {
            r?;
        }
        store.pool().close().await;
        Ok(())
    })
    .await?;
    phases.push(claim);
    let claimed = std::mem::take(&mut *claimed.lock().await);
    ensure!(claimed.len() as u64 == notifications, "claimed {} of {notifications} tasks", claimed.len());

    // Finish: FLUSHERS finish pools' worth of batched finishes, every call accepted.
    let work = Arc::new(Mutex::new(claimed));
    let finish_at = Timestamp::from_millis(now + 2_000);
    let finished = measure(pool, "finish", notifications, statements, false, || async {
        let store = PgStore::connect(url, 1).await?.with_finish_pool(url, u32::try_from(FLUSHERS)?).await?;
        let flushers = (0..FLUSHERS).map(|_| {
            let (store, work) = (store.clone(), Arc::clone(&work));
            async move {
                loop {
                    let batch: Vec<ClaimedTask> = {
                        let mut work = work.lock().await;
                        let keep = work.len().saturating_sub(BATCH as usize);
                        work.split_off(keep)
                    };
                    if batch.is_empty() {
                        return anyhow::Ok(());
                    }
                    let records: Vec<FinishRecord> = batch
                        .iter()
                        .map(|c| {
                            let observation =
                                Observation::Accepted { provider_msg_id: Some(format!("msg-{}", c.task_id.0)) };
                            FinishRecord {
                                task_id: c.task_id,
                                user_id: c.user_id.clone(),
                                token: c.token,
                                transition: finish(&c.finish, &observation, finish_at, Jitter::NONE),
                                observation,
                                detail: "ok".into(),
                                now: finish_at,
                            }
                        })
                        .collect();
                    for result in store.finish_batch(&records).await? {
                        result?;
                    }
                }
            }
        });
        for r in futures::future::join_all(flushers).await {
            r?;
        }
        store.pool().close().await;
        store.finish_pool().close().await;
        Ok(())
    })
    .await?;
    phases.push(finished);
    let sent: i64 =
        sqlx::query_scalar("SELECT count(*) FROM delivery_task WHERE state = 'SENT'").fetch_one(pool).await?;
    ensure!(u64::try_from(sent)? == notifications, "{sent} of {notifications} tasks SENT");
    // What the rows take once vacuumed, as an installation keeps them.
    sqlx::query("VACUUM").execute(pool).await?;
    let sizes: Vec<(String, i64)> = sqlx::query_as(
        "SELECT c.relname::text, pg_relation_size(c.oid) FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i') AND pg_relation_size(c.oid) > 8192 \
         ORDER BY 2 DESC",
    )
    .fetch_all(pool)
    .await?;
    if let Some(last) = phases.last_mut() {
        last.sizes = sizes;
    }
    Ok(phases)
}

/// Counters read before and after a phase.
struct Counters {
    lsn: String,
    tables: HashMap<String, [i64; 4]>,
    functions: HashMap<String, i64>,
}

async fn counters(pool: &PgPool) -> anyhow::Result<Counters> {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text").fetch_one(pool).await?;
    let tables: Vec<(String, i64, i64, i64, i64)> =
        sqlx::query_as("SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables")
            .fetch_all(pool)
            .await?;
    let functions: Vec<(String, i64)> =
        sqlx::query_as("SELECT funcname::text, calls FROM pg_stat_user_functions").fetch_all(pool).await?;
    Ok(Counters {
        lsn,
        tables: tables.into_iter().map(|(t, i, u, h, d)| (t, [i, u, h, d])).collect(),
        functions: functions.into_iter().collect(),
    })
}

/// WAL records between two positions: those touching a block of this database by (relation, kind), the
/// rest by kind. A record that touches several blocks (an update moving a row to another page, an index
/// split) is counted once, under its first block's relation.
const RECORDS: &str = "\
    SELECT COALESCE(c.relname::text, m[2], '') AS relation, r.resource_manager || '/' || r.record_type AS kind, \
      (m[1]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())) IS TRUE AS ours, \
      count(*) AS records, sum(r.record_length - r.fpi_length)::bigint AS bytes, sum(r.fpi_length)::bigint AS fpi \
    FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) r \
    LEFT JOIN LATERAL regexp_match(r.block_ref, 'rel \\d+/(\\d+)/(\\d+)') m ON true \
    LEFT JOIN pg_class c ON c.relfilenode = m[2]::oid \
    GROUP BY 1, 2, 3";

async fn measure<F, Fut>(
    pool: &PgPool,
    name: &'static str,
    notifications: u64,
    statements: bool,
    checkpoint: bool,
    phase: F,
) -> anyhow::Result<Phase>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    if checkpoint {
        sqlx::query("CHECKPOINT").execute(pool).await.context("CHECKPOINT before a phase")?;
    }
    if statements {
        sqlx::query("SELECT pg_stat_statements_reset()").execute(pool).await?;
    }
    let before = counters(pool).await?;
    let (cpu_before, started) = (cpu::snapshot(), Instant::now());
    phase().await?;
    let secs = started.elapsed().as_secs_f64();
    // The phase's backends have ended with its pools: once the postmaster has reaped them, their CPU is
    // its children's, and their statistics are reported.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let cpu = cpu::split(&cpu_before, &cpu::snapshot(), &std::collections::HashSet::new(), "");
    let after = counters(pool).await?;
    // The end: where WAL is flushed to (pg_walinspect reads flushed WAL only); the phase's commits are.
    let end: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text").fetch_one(pool).await?;
    let wal_bytes: f64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff($2::text::pg_lsn, $1::text::pg_lsn)::float8")
        .bind(&before.lsn)
        .bind(&end)
        .fetch_one(pool)
        .await?;
    let rows: Vec<(String, String, bool, i64, i64, i64)> =
        sqlx::query_as(RECORDS).bind(&before.lsn).bind(&end).fetch_all(pool).await?;
    let (mut records, mut unattributed, mut fpi_bytes) = (BTreeMap::new(), BTreeMap::new(), 0.0);
    for (relation, kind, ours, n, bytes, fpi) in rows {
        fpi_bytes += fpi as f64;
        if ours {
            let e = records.entry((relation, kind)).or_insert((0, 0));
            e.0 += n;
            e.1 += bytes;
        } else {
            let e = unattributed.entry(kind).or_insert((0, 0));
            e.0 += n;
            e.1 += bytes;
        }
    }
    let mut tables = BTreeMap::new();
    for (table, now) in &after.tables {
        let was = before.tables.get(table).copied().unwrap_or_default();
        let delta = [now[0] - was[0], now[1] - was[1], now[2] - was[2], now[3] - was[3]];
        if delta.iter().any(|d| *d != 0) {
            tables.insert(table.clone(), delta);
        }
    }
    let mut functions = BTreeMap::new();
    for (function, calls) in &after.functions {
        let delta = calls - before.functions.get(function).copied().unwrap_or_default();
        if delta != 0 {
            functions.insert(function.clone(), delta);
        }
    }
    let statements = if statements {
        let rows: Vec<StatementRow> = sqlx::query_as(
            "SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, plans, rows, total_exec_time AS exec_ms, \
               total_plan_time AS plan_ms, wal_bytes::float8 AS wal_bytes, toplevel \
             FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_user%' \
               AND query NOT LIKE '%pg_get_wal_records_info%' AND query NOT LIKE '%pg_current_wal%' \
               AND query NOT LIKE 'CHECKPOINT%' \
             ORDER BY total_exec_time DESC",
        )
        .fetch_all(pool)
        .await?;
        rows.into_iter()
            .map(|(query, calls, plans, rows, exec_ms, plan_ms, wal_bytes, toplevel)| Statement {
                query,
                calls,
                plans,
                rows,
                exec_ms,
                plan_ms,
                wal_bytes,
                toplevel,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Phase {
        name,
        notifications,
        secs,
        postgres_cpu: cpu.postgres,
        wal_bytes,
        fpi_bytes,
        records,
        unattributed,
        tables,
        functions,
        statements,
        sizes: Vec::new(),
    })
}

/// The short name of a statement: its first words, enough to tell Herald's statements apart.
fn short(query: &str) -> String {
    let text: String = query.chars().take(110).collect();
    if query.chars().count() > 110 {
        format!("{text}…")
    } else {
        text
    }
}

/// The account as Markdown: a summary per phase, then each phase's WAL records, rows, triggers and
/// statements per notification.
#[must_use]
pub fn report(phases: &[Phase]) -> String {
    let mut out = String::new();
    let n = phases.first().map_or(1, |p| p.notifications.max(1)) as f64;
    let _ = writeln!(
        out,
        "One notification with one channel (`push`, a webhook), {n:.0} of them: submitted by {SUBMITTERS} callers \
         at once through the store's `create` (as the API does), claimed by {CLAIMERS} loops in batches of \
         {BATCH}, finished by {FLUSHERS} flushers in batches of {BATCH} (every call accepted). Per notification:\n"
    );
    let _ = writeln!(out, "| Phase | WAL bytes | of them full-page images | WAL records | PostgreSQL CPU |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    for p in phases {
        let records: i64 =
            p.records.values().map(|r| r.0).sum::<i64>() + p.unattributed.values().map(|r| r.0).sum::<i64>();
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.1} | {:.3} ms |",
            p.name,
            p.wal_bytes / n,
            p.fpi_bytes / n,
            records as f64 / n,
            p.postgres_cpu * 1000.0 / n
        );
    }
    if let Some(last) = phases.last().filter(|p| !p.sizes.is_empty()) {
        let sizes: Vec<String> =
            last.sizes.iter().map(|(relation, bytes)| format!("`{relation}` {:.0}", *bytes as f64 / n)).collect();
        let _ = writeln!(out, "\nBytes per notification once delivered and vacuumed: {}.", sizes.join(", "));
    }
    for p in phases {
        let _ = writeln!(out, "\n### {} ({:.2} s)\n", p.name, p.secs);
        let _ = writeln!(out, "| Relation | WAL record | per notification | bytes each |");
        let _ = writeln!(out, "| --- | --- | ---: | ---: |");
        for ((relation, kind), (records, bytes)) in &p.records {
            let _ = writeln!(
                out,
                "| `{relation}` | {kind} | {:.2} | {:.0} |",
                *records as f64 / n,
                *bytes as f64 / (*records).max(1) as f64
            );
        }
        for (kind, (records, bytes)) in &p.unattributed {
            let _ = writeln!(
                out,
                "| (none) | {kind} | {:.2} | {:.0} |",
                *records as f64 / n,
                *bytes as f64 / (*records).max(1) as f64
            );
        }
        let _ = writeln!(out, "\n| Table | inserted | updated | of them HOT | deleted |");
        let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
        for (table, [ins, upd, hot, del]) in &p.tables {
            let per = |v: &i64| *v as f64 / n;
            let _ =
                writeln!(out, "| `{table}` | {:.2} | {:.2} | {:.2} | {:.2} |", per(ins), per(upd), per(hot), per(del));
        }
        if !p.functions.is_empty() {
            let calls: Vec<String> = p.functions.iter().map(|(f, c)| format!("`{f}` {:.3}", *c as f64 / n)).collect();
            let _ = writeln!(out, "\nTrigger functions called per notification: {}.", calls.join(", "));
        }
        if !p.statements.is_empty() {
            let _ = writeln!(
                out,
                "\n| Statement | runs | plans | rows | ms executing | ms planning | WAL bytes |\n\
                 | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
            );
            for s in &p.statements {
                let _ = writeln!(
                    out,
                    "| {}`{}` | {:.3} | {:.3} | {:.2} | {:.4} | {:.4} | {:.0} |",
                    if s.toplevel { "" } else { "↳ " },
                    short(&s.query).replace('|', "\\|").replace('`', "'"),
                    s.calls as f64 / n,
                    s.plans as f64 / n,
                    s.rows as f64 / n,
                    s.exec_ms / n,
                    s.plan_ms / n,
                    s.wal_bytes / n
                );
            }
        }
    }
    out
}
