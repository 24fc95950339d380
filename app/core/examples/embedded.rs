//! Herald's core embedded in another program: a team's own channel, Herald's use cases and worker driving
//! it in-process, no HTTP server.
//!
//! The team brings a channel of its own — here a chat service it already runs, reached in-process — by
//! implementing the `Channel` port, and a registry that holds it. Herald brings the rest: the PostgreSQL
//! store (one logical notification per (user, event key), the inbox, the fenced claim and finish), the
//! destination cipher, and the use cases and the worker of `herald-core`. The program sets a user's
//! destination, submits the same event twice, lets a worker deliver, and reads what happened — the calls
//! a web front end would make, without one.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run -p herald-core --example embedded
//! ```
//!
//! It migrates the database it is given and exits with status 1 if the story does not end as told.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use herald_core::usecases::{self, Reader};
use herald_core::worker::WorkerConfig;
use herald_core::Services;
use herald_domain::classify::Classified;
use herald_domain::{
    ChannelContract, ChannelKind, ChannelName, ChannelRules, EventKey, Millis, Observation, Policy, QueryConsistency,
    RefusalProof, RetryPolicy, TaskState, UserId,
};
use herald_ports::{Channel, ChannelRegistry, NewNotification, OutboundMessage};
use secrecy::{ExposeSecret as _, SecretString};

/// The team's chat service, reached in-process: it keeps what it was asked to deliver, and like a webhook
/// with an idempotency key it recognises a repeat of a key it has seen.
struct TeamChat {
    name: ChannelName,
    delivered: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Channel for TeamChat {
    fn name(&self) -> &ChannelName {
        &self.name
    }

    fn rules(&self) -> ChannelRules {
        ChannelRules {
            // Idempotent: a resend after an unknown outcome carries the same key and is recognised.
            contract: ChannelContract::new(
                ChannelKind::Webhook,
                RefusalProof::BeforeAcceptance,
                QueryConsistency::Immediate,
            ),
            retry: RetryPolicy::new(3, Millis(200), Millis(5_000)),
            policy: Policy::Safe,
            client_timeout: Millis(1_000),
            min_interval: Millis::ZERO,
            egress_guard: Millis::ZERO,
            digest: None,
        }
    }

    fn outbound_text(&self, body: &str, _digest_count: Option<u32>) -> String {
        body.to_owned()
    }

    /// A chat handle: `@` and 2 to 32 letters, digits or `-`. The reason never repeats the value.
    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        let handle = destination.strip_prefix('@').ok_or("must be a chat handle such as @ops-room")?;
        let valid = (2..=32).contains(&handle.len()) && handle.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        valid.then_some(()).ok_or("must be @ and 2 to 32 letters, digits or -")
    }

    async fn send(&self, message: &OutboundMessage) -> Classified {
        let mut delivered = self.delivered.lock().expect("the chat's log");
        let key = message.idempotency_key.as_str().to_owned();
        if delivered.iter().any(|(seen, _)| *seen == key) {
            return Classified {
                observation: Observation::AcceptedReplay { provider_msg_id: None },
                detail: String::new(),
            };
        }
        delivered.push((key, format!("{} ← {}", message.destination.expose_secret(), message.text)));
        let id = format!("chat-{}", delivered.len());
        Classified { observation: Observation::Accepted { provider_msg_id: Some(id) }, detail: String::new() }
    }

    async fn query(&self, _reference: &str) -> Classified {
        Classified { observation: Observation::QueryFailed, detail: "the chat has no query".to_owned() }
    }
}

/// The team's registry: one channel.
struct Registry(Arc<TeamChat>);

impl ChannelRegistry for Registry {
    fn get(&self, name: &ChannelName) -> Option<Arc<dyn Channel>> {
        (self.0.name() == name).then(|| Arc::clone(&self.0) as Arc<dyn Channel>)
    }

    fn names(&self) -> Vec<ChannelName> {
        vec![self.0.name.clone()]
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let store = herald_postgres::PgStore::connect(&url, 4).await?;
    store.migrate().await?;
    let chat = Arc::new(TeamChat { name: ChannelName::new("chat"), delivered: Mutex::default() });
    let keyring = herald_channels::cipher::Keyring::new(
        [("k1".to_owned(), herald_channels::cipher::Keyring::generate_key())],
        "k1",
    )?;
    let clock = Arc::new(store.clock());
    let services = Services::over(Arc::new(store), Arc::new(Registry(Arc::clone(&chat))), Arc::new(keyring), clock);

    // A user's destination: checked by the team's channel, stored encrypted by Herald.
    let user = UserId::new(format!("embedded-{}", std::process::id()));
    let channel = ChannelName::new("chat");
    let refused =
        usecases::set_preference(&services, &user, None, &channel, true, Some(&SecretString::from("ops room"))).await;
    println!("a destination the chat refuses: {}", refused.map_or_else(|e| e.to_string(), |_| "stored".into()));
    usecases::set_preference(&services, &user, None, &channel, true, Some(&SecretString::from("@ops-room"))).await?;

    // The same event twice: one logical notification.
    let new = NewNotification {
        user_id: user.clone(),
        event_key: EventKey::new("deploy-42-finished"),
        body: "Deploy 42 finished".into(),
        ttl: Millis::from_secs(3600),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    };
    let first = usecases::submit(&services, &new).await?;
    let again = usecases::submit(&services, &new).await?;
    println!("submitted: created {}, then created {} (the same notification)", first.created, again.created);

    // A worker of Herald's, in-process, drains what is due.
    let worker = services.worker(WorkerConfig {
        id: "embedded".into(),
        lease: Millis(30_000),
        batch: 8,
        idle_poll: std::time::Duration::from_millis(50),
    });
    let reports = worker.drain(10).await?;
    println!("the worker's cycles: {reports:?}");

    let view = usecases::notification(&services, &Reader::User(user.clone()), first.notification_ref)
        .await?
        .expect("the notification");
    let task = &view.tasks[0];
    println!(
        "task on {}: {} ({} attempt, provider id {:?})",
        task.channel, task.state, task.attempt_count, task.provider_msg_id
    );
    let delivered = chat.delivered.lock().expect("the chat's log").clone();
    println!(
        "the chat delivered {} message(s): {:?}",
        delivered.len(),
        delivered.iter().map(|d| &d.1).collect::<Vec<_>>()
    );

    let told = first.created && !again.created && task.state == TaskState::Sent && delivered.len() == 1;
    println!("embedded: {}", if told { "as told" } else { "NOT as told" });
    if !told {
        std::process::exit(1);
    }
    Ok(())
}
