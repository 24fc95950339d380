//! The one rule for a test whose real peer or premise is missing: it fails, saying what is missing and
//! how to get it, unless [`ALLOW_SKIP`] asks to skip it. A skipped test is recorded — a line in the file
//! named by [`SKIP_LOG`], and one on standard error, written past the test harness's capture — so that
//! `scripts/test.sh` reports it as skipped in its closing line (`N passed, N failed, N skipped`) instead
//! of counting it as passed. It lives here, beside the stand-ins, because the adapters' own tests and
//! Herald's integration tests both use it, and the stand-ins are the one test crate both depend on.

use std::io::Write as _;

/// Set to `1` to skip, rather than fail, the tests whose peer or premise is missing.
pub const ALLOW_SKIP: &str = "HERALD_ALLOW_SKIP";
/// The file every skipped test appends one line to (`scripts/test.sh` sets it and counts the lines).
pub const SKIP_LOG: &str = "HERALD_SKIP_LOG";

/// Whether [`ALLOW_SKIP`] is set to something other than empty or `0`.
#[must_use]
pub fn allowed() -> bool {
    std::env::var(ALLOW_SKIP).is_ok_and(|value| !value.is_empty() && value != "0")
}

/// Call where the running test cannot do what it is for because `missing` is missing; `fix` says how
/// to get it. Without [`ALLOW_SKIP`] it panics with both; with it, records the skip and returns, and the
/// caller returns at once.
///
/// # Panics
/// Unless skipping is allowed: that is the point.
#[track_caller]
pub fn missing(missing: &str, fix: &str) {
    assert!(
        allowed(),
        "{missing}: {fix}. (To skip this test instead, set {ALLOW_SKIP}=1: scripts/test.sh then reports it as \
         skipped, never as passed.)"
    );
    record(missing);
}

/// Writes one skipped test's line to [`SKIP_LOG`] and to standard error.
fn record(missing: &str) {
    // The test harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    let line = format!("{test}: {missing}\n");
    if let Some(path) = std::env::var_os(SKIP_LOG) {
        // One short write in append mode: lines of tests running at once do not interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = written {
            panic!("{missing}, and the skip cannot be recorded in {}: {error}", std::path::Path::new(&path).display());
        }
    }
    // Straight to the file descriptor: `eprintln!` would be captured and shown only for a failed test.
    let _ = std::io::stderr().write_all(format!("SKIPPED {line}").as_bytes());
}

/// Whether the person running the tests chose to leave `what` out by setting `variable` (to anything but
/// empty or `0`), for a quicker local loop. A test left out this way is recorded as skipped like one
/// whose peer is missing — never counted as passed — and `.ci/run` never sets such a variable.
#[must_use]
pub fn chosen(variable: &str, what: &str) -> bool {
    let chosen = std::env::var(variable).is_ok_and(|value| !value.is_empty() && value != "0");
    if chosen {
        record(&format!("{what} left out ({variable} is set)"));
    }
    chosen
}
