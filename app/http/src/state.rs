//! What every handler and page of the HTTP front end shares: the core's services, and what only this
//! front end knows — the tokens, the console's settings, readiness, the metrics handle, the body limit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald_core::auth::Authenticator;
use herald_core::Services;
use herald_ports::Clock;
use metrics_exporter_prometheus::PrometheusHandle;

/// Answers whether the service can take traffic. Reasons must be free of secrets (no URLs).
#[async_trait]
pub trait Readiness: Send + Sync {
    async fn check(&self) -> Result<(), String>;
}

/// Readiness judged by asking the shared clock, which in production is a database round trip.
pub struct ClockReadiness(pub Arc<dyn Clock>);

#[async_trait]
impl Readiness for ClockReadiness {
    async fn check(&self) -> Result<(), String> {
        self.0.now().await.map(|_| ()).map_err(|error| error.to_string())
    }
}

/// A readiness whose answer is kept for `ttl`: a flood of probes asks the database once per `ttl`, and
/// probes that arrive while a check runs wait for that check instead of starting their own.
pub struct CachedReadiness<R> {
    inner: R,
    ttl: Duration,
    last: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), String>)>>,
}

impl<R: Readiness> CachedReadiness<R> {
    pub fn new(inner: R, ttl: Duration) -> Self {
        CachedReadiness { inner, ttl, last: tokio::sync::Mutex::new(None) }
    }
}

#[async_trait]
impl<R: Readiness> Readiness for CachedReadiness<R> {
    async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref() {
            if at.elapsed() < self.ttl {
                return answer.clone();
            }
        }
        let answer = self.inner.check().await;
        *last = Some((std::time::Instant::now(), answer.clone()));
        answer
    }
}

/// How long `herald serve` keeps a `/readyz` answer.
pub const READINESS_TTL: Duration = Duration::from_secs(1);

/// Everything the handlers use: the services their use cases run on, and what only the HTTP front end
/// knows (tokens, console settings, readiness, metrics, the body limit). Cheap to clone: every field is
/// shared.
#[derive(Clone)]
pub struct ApiState {
    pub services: Services,
    pub auth: Arc<Authenticator>,
    /// The console's sessions, and whether the installation is reached over https.
    pub console: ConsoleSettings,
    pub readiness: Arc<dyn Readiness>,
    /// `None`: `/metrics` answers an empty document.
    pub metrics: Option<PrometheusHandle>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
}

impl ApiState {
    /// The state of a front end over `services`, with the default console settings.
    #[must_use]
    pub fn new(
        services: Services,
        auth: Arc<Authenticator>,
        readiness: Arc<dyn Readiness>,
        metrics: Option<PrometheusHandle>,
        body_limit: usize,
    ) -> ApiState {
        ApiState { services, auth, console: ConsoleSettings::default(), readiness, metrics, body_limit }
    }

    /// The services the handlers' use cases run on (`herald_core::usecases`).
    #[must_use]
    pub fn services(&self) -> Services {
        self.services.clone()
    }

    /// With these console settings.
    #[must_use]
    pub fn with_console(mut self, console: ConsoleSettings) -> ApiState {
        self.console = console;
        self
    }
}

/// What the console calls each channel: the `display_name` of its `[[channel]]`, its id where none is set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelNames(Arc<std::collections::BTreeMap<String, String>>);

impl ChannelNames {
    /// The display names, by channel id.
    pub fn new(names: impl IntoIterator<Item = (String, String)>) -> ChannelNames {
        ChannelNames(Arc::new(names.into_iter().collect()))
    }

    /// The name to show for the channel `id`.
    #[must_use]
    pub fn shown<'a>(&'a self, id: &'a str) -> &'a str {
        self.0.get(id).map_or(id, String::as_str)
    }
}

/// What the console's sign-in depends on beyond the tokens, and how it names channels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// Session lifetime, idle timeout, sign-in link lifetime (`[console]`).
    pub sessions: herald_core::sessions::SessionSettings,
    /// `server.https`: the installation is reached over https (a TLS-terminating proxy in front): the
    /// session cookie is `Secure` with the `__Host-` prefix, and every answer carries HSTS.
    pub https: bool,
    /// The channels' display names (`display_name` in `[[channel]]`).
    pub channel_names: ChannelNames,
    /// Sign-in with an identity provider is configured (`[operators.oidc]`): what its button calls it
    /// (empty: the page's own words).
    pub identity_provider: Option<String>,
}

pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

#[cfg(test)]
mod readiness_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its checks; answers "not ready" from the third on.
    struct Counting(Arc<AtomicUsize>);

    #[async_trait]
    impl Readiness for Counting {
        async fn check(&self) -> Result<(), String> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            if n >= 2 {
                Err("down".into())
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn a_flood_of_probes_checks_once_per_ttl() {
        let checks = Arc::new(AtomicUsize::new(0));
        let cached = Arc::new(CachedReadiness::new(Counting(Arc::clone(&checks)), Duration::from_secs(3600)));
        let probes = (0..50).map(|_| {
            let cached = Arc::clone(&cached);
            tokio::spawn(async move { cached.check().await })
        });
        for probe in futures::future::join_all(probes).await {
            assert_eq!(probe.expect("probe"), Ok(()));
        }
        assert_eq!(checks.load(Ordering::SeqCst), 1, "fifty concurrent probes, one check");

        let fresh = CachedReadiness::new(Counting(Arc::clone(&checks)), Duration::ZERO);
        let _ = fresh.check().await;
        assert_eq!(fresh.check().await, Err("down".into()), "an expired answer is checked again");
        assert_eq!(checks.load(Ordering::SeqCst), 3);
    }
}
