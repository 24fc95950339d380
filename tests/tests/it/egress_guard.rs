//! The egress guard (SPEC §16) end to end: a user's Web Push subscription may not aim Herald at the
//! machine it runs on or the network behind it — not through the API's PUT, not through a test send from the
//! API process, not through a worker's delivery — in any spelling of the address, through a name that
//! resolves inward, or through a resolver that answers differently the second time.
//!
//! The target is `InternalService`: one port on every local address (IPv4 and IPv6), recording the address
//! each connection was made to. Every case ends by asserting it saw no connection to this machine.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use herald_channels::config::{ChannelConfig, ConfigSecret};
use herald_channels::egress::{classify, Cidr, Egress, Lookup, SystemLookup};
use herald_channels::kinds::webpush::VapidKey;
use herald_channels::kinds::webpush::{Webpush, WebpushSettings};
use herald_channels::registry::HttpChannelRegistry;
use herald_domain::classify::EGRESS_REFUSED;
use herald_domain::{ChannelName, TaskState, UserId};
use herald_ports::store::TaskView;
use herald_ports::{DestinationCipher, PreferenceStore};
use herald_standin::InternalService;
use herald_tests::api::Api;
use herald_tests::cases::outcomes;
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::json;

const HOUR: u64 = 3_600_000;
const PATH: &str = "/v1/users/u1/channels/browser";
/// Planted in every endpoint's path: it must appear in no answer, detail or log line.
const CANARY: &str = "EGRESS-canary-4Kp8";
const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

fn subscription(endpoint: &str) -> String {
    json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": P256DH, "auth": AUTH}}).to_string()
}

/// A world whose Web Push channel `browser` is a production one (no `allow_loopback_endpoints`), built
/// with `egress`, as `herald serve` builds it from `[egress]`.
async fn world_with(egress: &Egress) -> World {
    let mut config = ChannelConfig::with_settings::<Webpush>(
        "browser",
        "",
        WebpushSettings {
            vapid_private_key: Some(ConfigSecret::new(VapidKey::generate().0)),
            vapid_subject: Some("mailto:ops@notify.example.org".into()),
            ..WebpushSettings::default()
        },
    );
    config.timeout_ms = 1_000;
    let mut world = World::with(ClockMode::Database, |configs| configs.push(config)).await.expect("world");
    let registry = HttpChannelRegistry::from_configs_with_egress(&world.configs, egress).expect("channels");
    world.set_registry(Arc::new(registry));
    world
}

/// Stores `destination` for `u1` without the API's check: a value stored before the guard existed, or
/// under other `[egress]` settings, which every send must check again.
async fn store_directly(world: &World, destination: &str) {
    let (user, channel) = (UserId::from("u1"), ChannelName::from("browser"));
    let stored =
        DestinationCipher::encrypt(&*world.cipher, &user, &channel, &SecretString::from(destination)).expect("encrypt");
    world.store.put(&user, &channel, true, Some(stored)).await.expect("put");
}

/// Submits one notification for `u1` and drains the worker once: a refusal before sending is final.
async fn deliver(world: &World, event: &str) -> TaskView {
    let created = world.submit("u1", event, HOUR, None).await.expect("submit");
    let task = created.tasks.iter().find(|t| t.channel.as_str() == "browser").expect("a browser task").task_id;
    world.worker("w1", 60_000).drain(5).await.expect("drain");
    world.task(created.notification_id, task).await.expect("task")
}

/// Everything logged on this thread (a current-thread runtime: the API server, the worker and the adapters
/// run here).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        // tracing caches each callsite's interest once for the whole process, and while a single dispatcher
        // is registered it asks the *registering* thread's default: another test's thread, which has none,
        // would cache "never" for the refusal's log line and blind this capture (tokio-rs/tracing#3611). A
        // global subscriber that keeps nothing makes every thread answer "interested", so the capture sees
        // every event of its own thread whoever reached the line first.
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
        });
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

/// This machine's address on the way out (found without sending a packet), when it has one besides
/// loopback.
fn own_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("8.8.8.8:53").ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

/// A resolver that gives its answers in turn (the last one again once they run out) and counts lookups.
struct Scripted {
    answers: Mutex<VecDeque<Vec<IpAddr>>>,
    calls: AtomicUsize,
}

impl Scripted {
    fn new(answers: impl IntoIterator<Item = Vec<IpAddr>>) -> Arc<Scripted> {
        Arc::new(Scripted { answers: Mutex::new(answers.into_iter().collect()), calls: AtomicUsize::new(0) })
    }
}

#[async_trait::async_trait]
impl Lookup for Scripted {
    async fn lookup(&self, _host: &str) -> io::Result<Vec<IpAddr>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().expect("answers");
        Ok(if answers.len() > 1 { answers.pop_front() } else { answers.front().cloned() }.unwrap_or_default())
    }
}

/// Defect (issue 40, SSRF): an endpoint was checked only for its scheme, stored, and then called by the test
/// send and the workers — a TLS handshake reached a listener on 127.0.0.1 and ::1. Now every spelling of an
/// inward address is refused by the PUT (422 naming `destination`, never the value), and a value stored
/// anyway is refused by the test send and by the worker (REJECTED, FAILED), with no connection made and
/// nothing of it logged.
#[tokio::test]
async fn inward_endpoints_are_refused_when_stored_tested_and_delivered_in_every_spelling() {
    let (logs, _guard) = Logs::capture();
    let internal = InternalService::start().await.expect("listener");
    let port = internal.port();
    let world = world_with(&Egress::default()).await;
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");
    let (user, channel) = (UserId::from("u1"), ChannelName::from("browser"));

    let mut endpoints: Vec<(String, String)> = [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0x7F000001",
        "0177.0.0.1",
        "127.0.0.1.",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::FFFF:7F00:1]",
        "0.0.0.0",
        "[::]",
        "localhost",
        "LOCALHOST.",
        "push.LocalHost",
    ]
    .iter()
    .map(|host| ((*host).to_owned(), format!("https://{host}:{port}/push/{CANARY}")))
    .collect();
    endpoints.push(("http 127.0.0.1".into(), format!("http://127.0.0.1:{port}/push/{CANARY}")));
    endpoints.push(("169.254.169.254".into(), format!("https://169.254.169.254/latest/meta-data/{CANARY}")));
    endpoints.push(("10.0.0.1".into(), format!("https://10.0.0.1:8443/{CANARY}")));
    endpoints.push(("192.168.1.1".into(), format!("https://192.168.1.1/{CANARY}")));

    for (i, (host, endpoint)) in endpoints.iter().enumerate() {
        let destination = subscription(endpoint);
        let before = world.store.destination(&user, &channel).await.expect("read");
        let answer = api.put(PATH, Some(&token), &json!({"destination": destination, "enabled": true})).await;
        let message = answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "destination");
        assert!(message.contains("public addresses"), "{host}: {message}");
        for secret in [host.as_str(), CANARY, &format!(":{port}")] {
            assert!(!answer.text.contains(secret), "{host}: the answer repeats {secret}: {}", answer.text);
        }
        let after = world.store.destination(&user, &channel).await.expect("read");
        assert_eq!(after, before, "{host}: a refused PUT writes nothing");

        // Stored anyway: the test send and the worker refuse it too.
        store_directly(&world, &destination).await;
        let test = api.post(&format!("{PATH}/test"), Some(&token), &json!({})).await;
        let doc = test.ok(StatusCode::OK);
        assert_eq!(doc["outcome"], "refused", "{host}: {doc}");
        assert!(doc["message"].as_str().is_some_and(|m| m.contains(EGRESS_REFUSED)), "{host}: {doc}");
        assert!(!test.text.contains(CANARY) && !test.text.contains(&format!(":{port}")), "{host}: {}", test.text);

        let task = deliver(&world, &format!("e{i}")).await;
        assert_eq!(outcomes(&task), ["REJECTED"], "{host}: refused, not sent and not unknown: {task:?}");
        assert_eq!(task.state, TaskState::Failed, "{host}");
        let error = task.last_error.clone().unwrap_or_default();
        assert!(error.starts_with(EGRESS_REFUSED) && !error.contains(CANARY), "{host}: {error}");
    }

    assert_eq!(internal.connections(), Vec::<IpAddr>::new(), "no connection reached this machine");
    let log = logs.text();
    assert!(log.contains(EGRESS_REFUSED), "the capture saw the refusals");
    assert!(!log.contains(CANARY), "an endpoint reached the logs");
    for (_, endpoint) in &endpoints {
        assert!(!log.contains(endpoint.as_str()), "{endpoint} reached the logs");
    }
}

/// A name is not resolved when it is stored, but at every send — through the guard, which refuses what
/// it resolves to: a scripted resolver answering loopback, and the system's resolver on this machine's own
/// host name (which resolves to loopback or to this machine's private address on almost every system).
#[tokio::test]
async fn a_name_that_resolves_inward_is_refused_at_every_send() {
    let internal = InternalService::start().await.expect("listener");
    let port = internal.port();
    let lookup = Scripted::new([vec![IpAddr::V4(Ipv4Addr::LOCALHOST), "::1".parse().expect("ip")]]);
    let world = world_with(&Egress::default().with_lookup(lookup.clone())).await;
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");

    let destination = subscription(&format!("https://push.example.net:{port}/push/{CANARY}"));
    let answer = api.put(PATH, Some(&token), &json!({"destination": destination, "enabled": true})).await;
    answer.ok(StatusCode::OK);
    assert_eq!(lookup.calls.load(Ordering::SeqCst), 0, "nothing is resolved when a destination is stored");
    let test = api.post(&format!("{PATH}/test"), Some(&token), &json!({})).await.ok(StatusCode::OK);
    assert_eq!(test["outcome"], "refused", "{test}");
    let task = deliver(&world, "e1").await;
    assert_eq!((outcomes(&task), task.state), (vec!["REJECTED".to_owned()], TaskState::Failed), "{task:?}");
    assert_eq!(lookup.calls.load(Ordering::SeqCst), 2, "one lookup per send");

    // The system's resolver, on this machine's own name.
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_owned();
    let resolved = SystemLookup.lookup(&hostname).await.unwrap_or_default();
    if hostname.is_empty() || resolved.is_empty() || resolved.iter().any(|ip| classify(*ip).is_none()) {
        eprintln!("this machine's name does not resolve to its own private or loopback addresses only: skipped");
    } else {
        let system = world_with(&Egress::default()).await;
        store_directly(&system, &subscription(&format!("https://{hostname}:{port}/push/{CANARY}"))).await;
        let task = deliver(&system, "e1").await;
        assert_eq!(outcomes(&task), ["REJECTED"], "{hostname} resolves to {resolved:?}: {task:?}");
    }
    assert_eq!(internal.connections(), Vec::<IpAddr>::new(), "no connection reached this machine");
}

/// DNS rebinding: the resolver answers an allowed address first and loopback the next time. The client
/// connects to exactly what the guard's one lookup returned, so the first send reaches the allowed address
/// (this machine's interface address, opened by `allow_private`) and never loopback; the next send looks up
/// again, gets loopback, and is refused.
#[tokio::test]
async fn a_rebinding_resolver_never_gets_a_connection_to_loopback() {
    let Some(own) = own_address() else {
        eprintln!("skipped: this machine has no address besides loopback");
        return;
    };
    let internal = InternalService::start().await.expect("listener");
    let port = internal.port();
    let lookup = Scripted::new([vec![own], vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]]);
    let allow: Cidr = own.to_string().parse().expect("a host range");
    let world = world_with(&Egress::new(vec![allow]).with_lookup(lookup.clone())).await;
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");

    let destination = subscription(&format!("https://rebind.example.net:{port}/push/{CANARY}"));
    api.put(PATH, Some(&token), &json!({"destination": destination, "enabled": true})).await.ok(StatusCode::OK);
    // The first lookup answers the allowed address: the connection goes there (and fails its TLS handshake).
    let test = api.post(&format!("{PATH}/test"), Some(&token), &json!({})).await.ok(StatusCode::OK);
    assert_eq!(test["outcome"], "not_sent", "{test}");
    assert_eq!(internal.connections(), [own], "the connection went to the address that was checked");
    // The next one answers loopback: refused, and nothing connects there.
    let task = deliver(&world, "e1").await;
    assert_eq!((outcomes(&task), task.state), (vec!["REJECTED".to_owned()], TaskState::Failed), "{task:?}");
    assert_eq!(lookup.calls.load(Ordering::SeqCst), 2, "one lookup per send, none by the client");
    assert_eq!(internal.connections(), [own], "loopback was never reached");
}

/// `[egress] allow_private` opens a listed range — an installation whose push service is internal — and
/// nothing else.
#[tokio::test]
async fn an_allowed_private_range_is_stored_and_delivered_to() {
    let Some(own) = own_address() else {
        eprintln!("skipped: this machine has no address besides loopback");
        return;
    };
    let internal = InternalService::start().await.expect("listener");
    let port = internal.port();
    let allow: Cidr = own.to_string().parse().expect("a host range");
    let world = world_with(&Egress::new(vec![allow])).await;
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");
    let host = match own {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let destination = subscription(&format!("https://{host}:{port}/push/{CANARY}"));
    api.put(PATH, Some(&token), &json!({"destination": destination, "enabled": true})).await.ok(StatusCode::OK);
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["RETRYABLE_REJECT"], "our listener fails the TLS handshake: {task:?}");
    assert_eq!(internal.connections(), [own]);
    let loopback = subscription(&format!("https://127.0.0.1:{port}/push/{CANARY}"));
    let answer = api.put(PATH, Some(&token), &json!({"destination": loopback, "enabled": true})).await;
    answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "destination");
}
