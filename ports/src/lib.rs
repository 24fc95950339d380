//! Herald's ports: the async traits that `herald-app` drives and the adapters implement.
//!
//! Ports speak only domain words. No `sqlx::` or `reqwest::` type appears in a signature; adapters map
//! their library errors to the classified error enums here (with an `Unknown` variant for the rest).
//! With the `mocks` feature every trait has a mockall mock (`MockDeliveryStore`, …) for unit tests
//! of orchestration; tests of behaviour use a real PostgreSQL and real stand-in channels instead.

pub mod audit;
pub mod channel;
pub mod cipher;
pub mod clock;
pub mod identity;
pub mod prefs;
pub mod sessions;
pub mod status;
pub mod store;
pub mod vault;

pub use audit::{AuditEvent, AuditFilter, AuditStore, NewAuditEvent};
pub use channel::{Channel, ChannelRegistry, OutboundMessage};
pub use cipher::{CipherError, DestinationCipher};
pub use clock::Clock;
pub use identity::{Identity, IdentityError, IdentityProvider, PendingSignIn, ProviderGrant, SignInStart, Standing};
pub use prefs::{ChannelPref, PreferenceStore, StoredDestination};
pub use sessions::{Credential, NewSession, NewSignInLink, SessionOwner, SessionRole, SessionStore, StoredSession};
pub use status::{ParkedStatusEvent, StatusEvent, StatusEventStore, StatusSink, SubscriptionFilter};
pub use store::{
    AttemptView, ChannelTable, ClaimBatch, ClaimRequest, ClaimedTask, Created, Deferred, DeliveryStore, EgressSlot,
    EgressStore, Erasure, ErasureRecord, FinishRecord, FinishResult, InboxChannel, InboxCursor, InboxItem, InboxStore,
    LifecycleStore, MarkRead, Merged, NewNotification, NotificationView, OutcomeBucket, OutcomeCount, ParkedBucket,
    ParkedFilter, ParkedTask, PurgeCutoffs, PurgeReport, ReadModels, ResolveError, Resolved, ReviewStore, Settled,
    StoreError, StoredSubmission, SubmissionStore, TaskCount, TaskSummary, TaskView, TestSendGrant,
};
pub use vault::{UserKeyVault, WrappedKey};

/// Every port a whole store implements, for `use herald_ports::prelude::*`.
pub mod prelude {
    pub use crate::store::prelude::*;
    pub use crate::{AuditStore, PreferenceStore, SessionStore, StatusEventStore};
}
