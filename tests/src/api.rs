//! Herald's real HTTP API over a [`World`]: the router `herald serve` builds, with the world's PostgreSQL
//! store, channel registry, keyring and clock, served on a loopback port and called with reqwest.
//!
//! Tests call it as a client would — bearer tokens, JSON bodies, status codes, problem documents — so
//! what they check is the contract of SPEC §11, not the handlers' internals.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use herald_app::compose::PgReadiness;
use herald_core::auth::Authenticator;
use herald_domain::TestSendQuota;
use herald_http as api;
use metrics_exporter_prometheus::PrometheusHandle;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::world::World;

/// The service token the test API accepts (may submit).
pub const SERVICE_TOKEN: &str = "test-service-token-0123456789-abcdef";
/// The admin token the test API accepts (review, resolve, any user).
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789-abcdefgh";
/// The test-send quota of [`Api::start`]: tests about other things press "test" several times a minute;
/// the quota itself is proved with production's default ([`Api::start_with_quota`]).
pub const GENEROUS_QUOTA: TestSendQuota = TestSendQuota { per_minute: 1000, per_day: 1000 };

const USER_TOKEN_SECRET: &str = "test user token secret, long enough";

/// The process-wide Prometheus handle. A process can install one recorder only, so every test of a
/// binary that wants `/metrics` to render must get its handle here.
///
/// # Panics
/// When another recorder was installed without this function.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| herald_app::metrics::install().expect("the only metrics recorder of this process")).clone()
}

/// A running API server and a client for it. Stops when dropped.
pub struct Api {
    /// `http://127.0.0.1:{port}`.
    pub base: String,
    pub client: reqwest::Client,
    auth: Arc<Authenticator>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// One answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Answer {
    /// The body as JSON.
    ///
    /// # Panics
    /// When it is not JSON.
    #[must_use]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `Content-Type` essence (before any `;`).
    #[must_use]
    pub fn content_type(&self) -> String {
        let value = self.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        value.split(';').next().unwrap_or("").trim().to_owned()
    }

    /// Asserts a JSON success answer with `status` and returns the document.
    ///
    /// # Panics
    /// When the status or the content type differ.
    pub fn ok(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.content_type(), "application/json", "{}", self.text);
        self.json()
    }

    /// Asserts an RFC 9457 problem document with `status` (type, title, status, detail present, the
    /// media type `application/problem+json`) and returns it.
    ///
    /// # Panics
    /// When it is not.
    pub fn problem(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.content_type(), "application/problem+json", "{}", self.text);
        let doc = self.json();
        assert_eq!(doc["status"], status.as_u16(), "{}", self.text);
        for member in ["type", "title", "detail"] {
            assert!(doc[member].as_str().is_some_and(|s| !s.is_empty()), "problem without {member}: {}", self.text);
        }
        doc
    }

    /// Asserts a problem document with `status` whose `errors` name `field`; returns that field's message.
    ///
    /// # Panics
    /// When it does not name the field.
    pub fn field_problem(&self, status: StatusCode, field: &str) -> String {
        let doc = self.problem(status);
        let errors = doc["errors"].as_array().unwrap_or_else(|| panic!("no errors member: {}", self.text));
        let found = errors.iter().find(|e| e["field"] == field);
        let found = found.unwrap_or_else(|| panic!("no error names {field}: {}", self.text));
        found["message"].as_str().unwrap_or_default().to_owned()
    }
}

impl Api {
    /// Serves Herald's router over `world` on 127.0.0.1 at a free port, with the default body limit.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(world: &World) -> anyhow::Result<Api> {
        Self::start_with_limit(world, api::DEFAULT_BODY_LIMIT).await
    }

    /// As [`Api::start`], with a body limit of `body_limit` bytes.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start_with_limit(world: &World, body_limit: usize) -> anyhow::Result<Api> {
        Self::start_with(world, body_limit, GENEROUS_QUOTA, api::limits::Limits::default()).await
    }

    /// As [`Api::start`], with these bounds on every client (timeouts, load shedding, rate per token), as
    /// `herald serve` applies them from `[server]`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start_bounded(world: &World, body_limit: usize, limits: api::limits::Limits) -> anyhow::Result<Api> {
        Self::start_with(world, body_limit, GENEROUS_QUOTA, limits).await
    }

    /// As [`Api::start`], with the test-send quota `quota` (`TestSendQuota::default()` is production's).
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start_with_quota(world: &World, quota: TestSendQuota) -> anyhow::Result<Api> {
        Self::start_with(world, api::DEFAULT_BODY_LIMIT, quota, api::limits::Limits::default()).await
    }

    /// The authenticator of [`Api::start`]: [`SERVICE_TOKEN`], [`ADMIN_TOKEN`] and the test user-token key.
    #[must_use]
    pub fn default_auth() -> Authenticator {
        Authenticator::new(
            &[SecretString::from(SERVICE_TOKEN)],
            &[SecretString::from(ADMIN_TOKEN)],
            SecretString::from(USER_TOKEN_SECRET),
        )
    }

    async fn start_with(
        world: &World,
        body_limit: usize,
        quota: TestSendQuota,
        limits: api::limits::Limits,
    ) -> anyhow::Result<Api> {
        let config = Self::default_auth();
        let console = api::ConsoleSettings {
            channel_names: api::ChannelNames::new(
                world.configs.iter().filter_map(|c| Some((c.name.clone(), c.display_name.clone()?))),
            ),
            ..api::ConsoleSettings::default()
        };
        Self::start_configured(world, config, console, limits, (body_limit, quota)).await
    }

    /// As [`Api::start`], with this authenticator (another process's configuration over the same database),
    /// these console settings and these limits.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start_configured(
        world: &World,
        auth: Authenticator,
        console: api::ConsoleSettings,
        limits: api::limits::Limits,
        (body_limit, quota): (usize, TestSendQuota),
    ) -> anyhow::Result<Api> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::serve_on(world, listener, world.services(), auth, console, limits, (body_limit, quota))
    }

    /// Herald with console sign-in at a real OpenID provider ([`OidcPeer`]: oidc-provider from npm) that
    /// knows `users`; claim values `herald-viewers`, `herald-resolvers`, `herald-admins` map to the three
    /// roles, through the claim `roles`. Returns the provider too (the test changes its users).
    ///
    /// # Errors
    /// When no port can be bound or the provider does not start.
    pub async fn start_with_oidc(
        world: &World,
        users: &[(&str, crate::peers::oidc::User)],
    ) -> anyhow::Result<(Api, crate::peers::oidc::OidcPeer)> {
        use herald_domain::operators::Role;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let redirect_url = format!("http://{}{}", listener.local_addr()?, herald_app::config::OIDC_CALLBACK_PATH);
        let peer = crate::peers::oidc::OidcPeer::start(&redirect_url, users).await?;
        let config = herald_app::config::OidcConfig {
            issuer: peer.issuer(),
            client_id: crate::peers::oidc::CLIENT_ID.to_owned(),
            client_secret: secrecy::SecretString::from(crate::peers::oidc::CLIENT_SECRET),
            redirect_url,
            scopes: vec!["profile".to_owned()],
            role_claim: "roles".to_owned(),
            roles: vec![
                ("herald-viewers".to_owned(), Role::Viewer),
                ("herald-resolvers".to_owned(), Role::Resolver),
                ("herald-admins".to_owned(), Role::Admin),
            ],
            display_name: Some("Test IdP".to_owned()),
            allow_http_issuer: true,
        };
        let services = world.services().with_oidc(herald_app::compose::oidc_sign_in(&config)?);
        let console = api::ConsoleSettings { identity_provider: Some("Test IdP".to_owned()), ..Default::default() };
        let api = Self::serve_on(
            world,
            listener,
            services,
            Self::default_auth(),
            console,
            api::limits::Limits::default(),
            (api::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
        )?;
        Ok((api, peer))
    }

    /// Serves Herald's router over `services` on `listener`.
    fn serve_on(
        world: &World,
        listener: tokio::net::TcpListener,
        services: herald_core::Services,
        auth: Authenticator,
        console: api::ConsoleSettings,
        limits: api::limits::Limits,
        (body_limit, quota): (usize, TestSendQuota),
    ) -> anyhow::Result<Api> {
        let auth = Arc::new(auth);
        let state = api::ApiState::new(
            services.with_test_send_quota(quota),
            auth.clone(),
            Arc::new(PgReadiness(world.db.store.clone())),
            Some(metrics_handle()),
            body_limit,
        )
        .with_console(console);
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let router = api::router_with(state, limits);
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            let serving =
                api::serve_bounded(listener, router, shutdown, Duration::from_secs(1), limits.header_read_timeout);
            if let Err(error) = serving.await {
                eprintln!("test API stopped: {error}");
            }
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        Ok(Api { base, client, auth, stop: Some(stop) })
    }

    /// The bearer token bound to `user`.
    #[must_use]
    pub fn user_token(&self, user: &str) -> String {
        self.auth.user_token(user).expose_secret().to_owned()
    }

    /// A bearer token of `user` that expires at `expires` (Unix seconds).
    #[must_use]
    pub fn user_token_until(&self, user: &str, expires: u64) -> String {
        self.auth.user_token_until(user, expires).expose_secret().to_owned()
    }

    /// A one-time console sign-in link of `user` (its path and query), made through the API as a business
    /// service would.
    ///
    /// # Panics
    /// When the API refuses.
    pub async fn sign_in_link(&self, user: &str) -> String {
        let answer =
            self.call(Method::POST, &format!("/v1/users/{user}/sign-in-links"), Some(SERVICE_TOKEN), None).await;
        answer.ok(StatusCode::CREATED)["path"].as_str().expect("a path").to_owned()
    }

    /// A request with an optional bearer token and an optional JSON body.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub async fn call(&self, method: Method, path: &str, token: Option<&str>, body: Option<&Value>) -> Answer {
        let bytes = body.map(|b| (b.to_string().into_bytes(), "application/json"));
        self.raw(method, path, token, bytes).await
    }

    /// A request with a raw body and its content type.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub async fn raw(&self, method: Method, path: &str, token: Option<&str>, body: Option<(Vec<u8>, &str)>) -> Answer {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some((bytes, content_type)) = body {
            request = request.header(CONTENT_TYPE, content_type).body(bytes);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_else(|e| panic!("{path}: body: {e}"));
        Answer { status, headers, text }
    }

    /// `GET` with a token.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        self.call(Method::GET, path, token, None).await
    }

    /// `POST` of a JSON body with a token.
    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Answer {
        self.call(Method::POST, path, token, Some(body)).await
    }

    /// `PUT` of a JSON body with a token.
    pub async fn put(&self, path: &str, token: Option<&str>, body: &Value) -> Answer {
        self.call(Method::PUT, path, token, Some(body)).await
    }
}

/// What a request could have written: row counts of every table the API writes, and a fingerprint of
/// the task states and preference versions (a refused resolve or preference change updates rows, it
/// does not add them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub notification: i64,
    pub inbox_item: i64,
    pub delivery_task: i64,
    pub delivery_attempt: i64,
    pub channel_pref: i64,
    pub user_erasure: i64,
    pub audit_event: i64,
    pub fingerprint: String,
}

impl Written {
    /// Reads the counts now.
    ///
    /// # Errors
    /// Store failures.
    pub async fn now(world: &World) -> anyhow::Result<Written> {
        let count = |table: &str| format!("SELECT count(*) FROM {table}");
        let fingerprint: Option<String> = sqlx::query_scalar(
            "SELECT concat_ws('|', \
               (SELECT string_agg(id || ':' || state || ':' || needs_review, ',' ORDER BY id) FROM delivery_task), \
               (SELECT string_agg(user_id || '/' || channel || ':' || version || ':' || enabled, ',' \
                  ORDER BY user_id, channel) FROM channel_pref))",
        )
        .fetch_one(world.db.store.pool())
        .await?;
        Ok(Written {
            notification: world.db.count(&count("notification")).await?,
            inbox_item: world.db.count(&count("inbox_item")).await?,
            delivery_task: world.db.count(&count("delivery_task")).await?,
            delivery_attempt: world.db.count(&count("delivery_attempt")).await?,
            channel_pref: world.db.count(&count("channel_pref")).await?,
            user_erasure: world.db.count(&count("user_erasure")).await?,
            audit_event: world.db.count(&count("audit_event")).await?,
            fingerprint: fingerprint.unwrap_or_default(),
        })
    }
}
