//! Waiting in tests, written once: poll a condition until it holds, with a generous safety limit that is a
//! guard against a hung test — never a timing assertion — and a failure message that names what was
//! awaited and where the test waited.

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

/// How long a wait may take before the test fails: far above any expected wait on a loaded machine.
pub const SAFETY: Duration = Duration::from_secs(60);

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(5);

/// Polls `condition` until it holds; panics after [`SAFETY`] naming `what` and the caller's line.
///
/// ```no_run
/// # async fn demo(standin: &herald_standin::StandIn) {
/// herald_tests::wait::wait_until("the first acceptance", || async { standin.sends() == 1 }).await;
/// # }
/// ```
#[track_caller]
pub fn wait_until<'a, F, Fut>(what: &'a str, condition: F) -> impl Future<Output = ()> + 'a
where
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = bool> + 'a,
{
    let at = Location::caller();
    async move {
        if let Err(error) = try_wait_until(what, condition).await {
            panic!("{at}: {error}");
        }
    }
}

/// As [`wait_until`], for code that reports failures as errors rather than panics.
///
/// # Errors
/// When `condition` did not hold within [`SAFETY`].
pub async fn try_wait_until<F, Fut>(what: &str, mut condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let waited = tokio::time::timeout(SAFETY, async {
        while !condition().await {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    anyhow::ensure!(waited.is_ok(), "gave up waiting for {what} after {} s", SAFETY.as_secs());
    Ok(())
}
