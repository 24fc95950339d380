//! The status events' dispatcher (issue 46): takes due events from the outbox, posts each to its
//! subscription's endpoint (the [`StatusSink`] signs it), and records what the endpoint answered —
//! delivered, due again after a backoff, or parked after too many posts. It runs beside the worker, on
//! its own loop, so an endpoint that is slow or down never holds up a notification's delivery.
//!
//! At least once: an event is marked delivered only after the endpoint took it; a dispatcher that dies
//! between the post and the mark leaves the event held until its hold ends, and it is posted again with
//! the same id (the receiver drops repeats by `webhook-id`).

use std::sync::Arc;
use std::time::Duration;

use herald_domain::{after_post, Jitter, Millis, RetryPolicy, StatusNext};
use herald_ports::{Clock, StatusEventStore, StatusSink, StoreError};

/// How a dispatcher runs.
#[derive(Clone, Debug)]
pub struct DispatchSettings {
    /// Events taken per claim, posted at once.
    pub batch: u32,
    /// How long a claimed event is held before another dispatcher may take it: above the sink's timeout.
    pub hold: Millis,
    /// How long to wait when nothing was due.
    pub poll: Duration,
    /// Posts per event (`max_attempts`) and the backoff between them.
    pub retry: RetryPolicy,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        DispatchSettings {
            batch: 32,
            hold: Millis(30_000),
            poll: Duration::from_millis(200),
            retry: RetryPolicy::new(8, Millis(1_000), Millis(300_000)),
        }
    }
}

/// The subscriptions one dispatcher serves.
#[derive(Clone, Debug, Default)]
pub struct Subscriptions {
    pub names: Vec<String>,
    /// Those whose events carry the notification's body.
    pub with_body: Vec<String>,
}

pub struct Dispatcher {
    store: Arc<dyn StatusEventStore>,
    sink: Arc<dyn StatusSink>,
    clock: Arc<dyn Clock>,
    subscriptions: Subscriptions,
    settings: DispatchSettings,
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub delivered: usize,
    pub retried: usize,
    pub parked: usize,
}

impl Round {
    #[must_use]
    pub fn posts(&self) -> usize {
        self.delivered + self.retried + self.parked
    }
}

impl Dispatcher {
    #[must_use]
    pub fn new(
        store: Arc<dyn StatusEventStore>,
        sink: Arc<dyn StatusSink>,
        clock: Arc<dyn Clock>,
        subscriptions: Subscriptions,
        settings: DispatchSettings,
    ) -> Dispatcher {
        Dispatcher { store, sink, clock, subscriptions, settings }
    }

    /// Claims the due events, posts them all at once and records each answer.
    ///
    /// # Errors
    /// Store failures (an event whose answer could not be recorded falls due again when its hold ends).
    pub async fn run_once(&self) -> Result<Round, StoreError> {
        let now = self.clock.now().await?;
        let events = self
            .store
            .claim_status_events(
                &self.subscriptions.names,
                &self.subscriptions.with_body,
                self.settings.batch,
                now,
                self.settings.hold,
            )
            .await?;
        let posts = events.iter().map(|event| async move { (event, self.sink.post(event).await) });
        let answers = futures::future::join_all(posts).await;
        let now = self.clock.now().await?;
        let mut round = Round::default();
        let mut delivered = Vec::new();
        for (event, result) in answers {
            match after_post(result, event.tries, &self.settings.retry, Jitter::from_bits(rand::random()), now) {
                StatusNext::Delivered => {
                    delivered.push(event.sequence);
                    round.delivered += 1;
                    metrics::counter!("herald_status_events_total", "result" => "delivered").increment(1);
                }
                StatusNext::RetryAt { due, error } => {
                    tracing::debug!(subscription = %event.subscription, tries = event.tries, %error, "status event not taken");
                    self.store.status_event_retry(event.sequence, due, &error).await?;
                    round.retried += 1;
                    metrics::counter!("herald_status_events_total", "result" => "not_taken").increment(1);
                }
                StatusNext::Park { error } => {
                    tracing::warn!(subscription = %event.subscription, tries = event.tries, %error, "status event parked: its endpoint kept refusing it");
                    self.store.status_event_park(event.sequence, now, &error).await?;
                    round.parked += 1;
                    metrics::counter!("herald_status_events_total", "result" => "parked").increment(1);
                }
            }
        }
        self.store.status_events_delivered(&delivered, now).await?;
        Ok(round)
    }

    /// Runs rounds until `stop` says so: at once again after a full batch, after the poll interval
    /// otherwise, and after a growing pause while the store fails.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        if self.subscriptions.names.is_empty() {
            return;
        }
        let mut failures = 0u32;
        while !*stop.borrow() {
            let pause = match self.run_once().await {
                Ok(round) if round.posts() >= self.settings.batch as usize => {
                    failures = 0;
                    continue;
                }
                Ok(_) => {
                    failures = 0;
                    self.settings.poll
                }
                Err(error) => {
                    failures += 1;
                    tracing::warn!(error = %crate::report::error_chain(&error), "status events: the store failed");
                    Duration::from_millis(self.settings.retry.backoff(failures, Jitter::from_bits(rand::random())).0)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.changed() => {}
            }
        }
    }
}
