//! Model-based test of the task store: the real `PgStore` and a reference model, driven through the
//! same random sequences of operations, compared row by row after every step.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo test -p herald-tests --test model
//! HERALD_MODEL_CASES=500 HERALD_MODEL_STEPS=80 cargo test -p herald-tests --test model   # deeper
//! ```
//!
//! * `HERALD_MODEL_CASES` — how many generated cases to run (default 100, about 10 s; CI runs that).
//!   500 with 80 steps takes about a minute and a half.
//! * `HERALD_MODEL_STEPS` — the longest operation sequence of one case (default 40).
//!
//! A failure is shrunk by proptest to a short sequence and reported with the setup, the numbered
//! operations, the step that failed, what the store answered against what the model expected, and a
//! field-by-field diff of the rows (times as `T+ms` from the start of the clock). The seed of a
//! failure is saved beside this file (`model.proptest-regressions`) and replayed first on the next
//! run. A failure that needs a particular interleaving of the concurrent steps does not always
//! reproduce, so it shrinks less. With `--nocapture` a passing run prints one line: how often each
//! situation (late finish, expired lease, park, deferral, race order, …) came up.
//!
//! # The model (`model/reference.rs`)
//!
//! Plain Rust data with the same rows as the store — the task row (state, `outcome_uncertain`,
//! `uncertain_since`, `needs_review`, `next_attempt_at`, lease, token, `attempt_count`,
//! `last_attempt_no`, provider message id, `last_error`), its attempt rows, the notification and its
//! inbox item, the preference switches — written the way SPEC §2–§6 say they are written. Every
//! *decision* is the domain's: `decide_claim` for each claimed row, `finish` for every observation,
//! `egress::give_back` for a holder that does not call, `resolve_manually` for the human exit. The model
//! adds only the bookkeeping the store is responsible for: which rows a claim may lock, fencing by
//! token, `LEASE_EXPIRED` on the superseded holder's attempt, `late_outcome`, attempt numbering, and
//! the give-back undoing its attempt. So when the domain changes, the model follows; when the store
//! stores something other than what the domain decided, the rows differ.
//!
//! # The operations (`model/ops.rs`)
//!
//! One case is three channels — `push` (webhook: idempotent), `sms` (queryable, a "not found"
//! believable at once or only after a delay) and `miao` (Miaotixing: neither key nor query), with
//! generated budgets and backoff, each rate-limited (a global egress interval, default guard) in a
//! quarter of the cases, and no digest — three users with generated preference rows (none, off, on),
//! and up to `HERALD_MODEL_STEPS` of:
//!
//! * **create** a notification (user, event key from a small set so duplicates happen, TTL, optional
//!   `max_attempts`);
//! * **claim** by one of several workers with a batch size, a lease and a subset of the channels; on a
//!   rate-limited channel the first call takes the egress slot and the other due tasks are deferred
//!   untouched (an expired holder's task is written as `deferral` says), and a channel whose slot is not
//!   free is not selected at all;
//! * **claim concurrently**: two claims at once (`SKIP LOCKED`): they must not both write a task, each
//!   must be an oldest-due-first prefix of what the other left (rows the other held locked may be
//!   skipped), and the pair must be explained by one of the two sequential orders;
//! * **finish** an open attempt with any observation (with or without jitter) — in any order, and late:
//!   a superseded holder's finish must be `Stale` and land as `late_outcome`; **finish again** an attempt
//!   already finished: the very same finish (a retry whose answer was lost: `Applied`, nothing changes)
//!   or another observation (late);
//! * **race** a finish against a claim: the result must be one of the two orders (the claim may skip
//!   the row the finish holds);
//! * **give back** an open attempt without calling (`egress::give_back`);
//! * **tick** the clock, or **jump** to a moment a task becomes due, a lease ends or a notification
//!   expires (±1 ms): lease expiry and TTL expiry happen by clock steps, never by sleeping — the store
//!   takes `now` from the caller (`ClaimRequest.now`, `FinishRecord.now`, …);
//! * **resolve** a task manually as SENT, FAILED or RESEND (mostly parked ones; a second resolution, or
//!   one of a task that is not parked, must be refused with the task's state; RESEND gives a fresh
//!   budget and the task is claimed again like a new one);
//! * **switch** a user's channel on or off.
//!
//! # What is compared
//!
//! After every step, every row: the `delivery_task` columns above plus id, user, notification,
//! channel, reference, `max_attempts` and `digest_count`; every `delivery_attempt` row (attempt
//! number, token of a call, action, lease owner, outcome, late outcome, detail, late detail, note,
//! started, finished and late times); every notification (body, expiry, `max_attempts`) with its one
//! inbox item; the `channel_egress` reservations; the tally of task rows the triggers of migration
//! `0010` keep for the task gauges, against an exact count of the rows (and at the end of the case, the
//! gauges' answer itself). And every answer: `create` (created or duplicate, its
//! tasks), the claim batch (which tasks — oldest due first, ties by id, checked as a prefix of the
//! runnable tasks so that concurrent claims can be judged too — and for each, call, defer or settle as
//! the domain decides, the claimed attempt's number, action, `FinishContext`, body, expiry and
//! destination, the settled outcome, state and parking, the count of expired leases), `finish` and
//! `give_back` (`Applied` or `Stale`), and `resolve_manually` (resolved, or refused as not parked).
//!
//! Each case starts from empty tables in one database made for this test (truncated between cases,
//! not recreated: a case costs one `TRUNCATE`, not a `CREATE DATABASE`).
//!
//! Not modelled: digests (`tests/it/digest.rs`), the test send's egress reservation, and store
//! failures. The test found one store discrepancy, now fixed and checked after every refused manual
//! resolution (`Harness::assert_row_unlocked`): a refusal kept its row lock until the pool rolled the
//! connection back, so a claim right after it could pass the task over.

#[path = "model/driver.rs"]
mod driver;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/rows.rs"]
mod rows;

use std::fmt::Write as _;
use std::sync::Mutex;

use herald_tests::TestDb;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// Runs one case; the error names the step, the operation and what differed.
async fn run_case(db: &TestDb, case: &ops::Case, stats: &Mutex<driver::Stats>) -> Result<(), String> {
    let mut harness = driver::Harness::start(db.store.clone(), &case.setup).await?;
    harness.compare().await.map_err(|e| format!("after the setup: {e}"))?;
    for (i, op) in case.ops.iter().enumerate() {
        let step = i + 1;
        if let Err(e) = harness.step(op, step).await {
            // The model has taken the step as it expected it: the rows show what the store did instead.
            let rows = harness.compare().await.err().map(|rows| format!("\nand then the {rows}")).unwrap_or_default();
            return Err(format!("step {step} ({op:?}): {e}{rows}"));
        }
        harness.compare().await.map_err(|e| format!("after step {step} ({op:?}): {e}"))?;
    }
    let gauges = herald_tests::tally::gauge_differences(&db.store).await.map_err(|e| format!("task gauges: {e:#}"))?;
    if !gauges.is_empty() {
        return Err(format!("after the last step the task gauges differ from the rows: {gauges:?}"));
    }
    stats.lock().expect("stats").add(&harness.stats);
    Ok(())
}

fn report(case: &ops::Case, reason: &str) -> String {
    // The steps after the failing one never ran: leave them out.
    let failed_at = reason
        .trim_start_matches("after ")
        .strip_prefix("step ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(case.ops.len());
    let mut out = String::from("the store and the model disagree.\n\nminimal failing case:\n");
    let _ = writeln!(out, "  setup: {:?}", case.setup);
    for (i, op) in case.ops.iter().enumerate().take(failed_at) {
        let _ = writeln!(out, "  {:>3}. {op:?}", i + 1);
    }
    let _ = write!(out, "\n{reason}");
    out
}

#[test]
fn the_store_behaves_like_the_model() {
    let cases = env_number("HERALD_MODEL_CASES", 100);
    let steps = env_number("HERALD_MODEL_STEPS", 40).max(1);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let db = runtime.block_on(TestDb::fresh()).expect("test database");
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 2_000,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    });
    let strategy = ops::case(usize::try_from(steps).unwrap_or(40));
    let stats = Mutex::new(driver::Stats::default());
    let result =
        runner.run(&strategy, |case| runtime.block_on(run_case(&db, &case, &stats)).map_err(TestCaseError::fail));
    match result {
        Ok(()) => {
            // Shown with `--nocapture`: how often the situations that matter came up.
            let stats = *stats.lock().expect("stats");
            println!("model test: {cases} cases, {stats:?}");
            if cases >= 50 {
                assert!(
                    stats.stale > 0 && stats.lease_expired > 0 && stats.parked_at_claim > 0 && stats.resolved > 0,
                    "the generated cases never reached a late finish, an expired lease, a claim-time park or a \
                     manual resolution: the generator needs fixing ({stats:?})"
                );
            }
        }
        Err(TestError::Fail(reason, case)) => panic!("{}", report(&case, &reason.to_string())),
        Err(TestError::Abort(reason)) => panic!("the model test aborted: {reason}"),
    }
}
