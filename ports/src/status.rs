//! Status events (issue 46): the outbox of what happened to each delivery, and the endpoint they go to.

use async_trait::async_trait;
use herald_domain::{Millis, NotificationRef, PostResult, StatusKind, Timestamp};

use crate::store::StoreError;

/// What the store must know of one configured subscription to write its events: its name, the kinds it
/// wants and whose notifications. The URL and the signing secret never reach the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionFilter {
    pub name: String,
    pub kinds: Vec<StatusKind>,
    /// The names of the service tokens whose notifications it is told about; `None`: every notification's.
    pub service_tokens: Option<Vec<String>>,
}

/// One event for one subscription, as the dispatcher posts it. Never a destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusEvent {
    /// The `webhook-id`: the same for every post of this event, so the receiver can drop repeats.
    pub id: uuid::Uuid,
    /// Larger for every later event of the same delivery (notification and channel), for this subscription;
    /// unique, so the store settles an event by it.
    pub sequence: i64,
    pub subscription: String,
    pub kind: StatusKind,
    pub notification: NotificationRef,
    pub event_key: String,
    pub channel: String,
    /// The delivery attempt the event is about (the attempt's number in the delivery log).
    pub attempt: u32,
    /// The reason class (`refused`, `suppressed`) or the decision (`resolved`).
    pub reason: Option<String>,
    /// Who decided (`resolved`): the operator's name as the audit trail shows it.
    pub actor: Option<String>,
    /// The channel's id of the message (`accepted`), when the channel gave one.
    pub channel_message_id: Option<String>,
    pub occurred_at: Timestamp,
    /// The posts made so far, this one included.
    pub tries: u32,
    /// The notification's body, only for a subscription that asks for it.
    pub body: Option<String>,
}

/// A parked event, for the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedStatusEvent {
    pub id: uuid::Uuid,
    pub subscription: String,
    pub kind: StatusKind,
    pub notification: NotificationRef,
    pub channel: String,
    pub tries: u32,
    pub last_error: Option<String>,
    pub parked_at: Timestamp,
}

/// The status events' outbox.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait StatusEventStore: Send + Sync {
    /// Replaces the subscriptions the store writes events for: from now on each committed task change
    /// writes one event per subscription that wants its kind (none at all when `subscriptions` is empty).
    async fn set_subscriptions(&self, subscriptions: &[SubscriptionFilter]) -> Result<(), StoreError>;

    /// Takes up to `limit` events of `subscriptions` due at `now`, oldest first, skipping those another
    /// dispatcher holds, and holds them for `hold` (a dispatcher that dies lets them fall due again: at
    /// least once). Each counts one more try. The body comes only for the subscriptions in `with_body`.
    async fn claim_status_events(
        &self,
        subscriptions: &[String],
        with_body: &[String],
        limit: u32,
        now: Timestamp,
        hold: Millis,
    ) -> Result<Vec<StatusEvent>, StoreError>;

    /// The endpoints took these events, by [`StatusEvent::sequence`] (one statement for a round's events).
    async fn status_events_delivered(&self, sequences: &[i64], now: Timestamp) -> Result<(), StoreError>;

    /// The endpoint did not take the event of this sequence: due again at `due`.
    async fn status_event_retry(&self, sequence: i64, due: Timestamp, error: &str) -> Result<(), StoreError>;

    /// The endpoint kept refusing the event of this sequence: parked, posted no more.
    async fn status_event_park(&self, sequence: i64, now: Timestamp, error: &str) -> Result<(), StoreError>;

    /// The parked events, newest first, at most `limit`.
    async fn parked_status_events(&self, limit: u32) -> Result<Vec<ParkedStatusEvent>, StoreError>;

    /// How many events are parked.
    async fn parked_status_event_count(&self) -> Result<u64, StoreError>;
}

/// Where status events go: the configured endpoints, each post signed.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait StatusSink: Send + Sync {
    /// Posts `event` to its subscription's endpoint, once, and says whether the endpoint took it.
    async fn post(&self, event: &StatusEvent) -> PostResult;
}
