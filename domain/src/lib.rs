//! Herald's pure core.
//!
//! This crate holds every decision that makes Herald correct — whether a task may be claimed, which
//! action a claim performs, what an observation from a channel means for the task, when a retry is due,
//! whether a call may leave now or must wait for the channel's egress interval, and whether an event is
//! prompted at once or merged into a digest — as plain functions over plain data.
//!
//! **It does no I/O and reads no clock.** Time is always an argument (`now: Timestamp`), randomness is
//! an argument ([`retry::Jitter`]), and every decision returns a `#[must_use]` value that the caller
//! stores. That keeps the rules in one place where property tests can try millions of histories, and
//! lets the adapters be thin: SQL stores a decision, it never re-implements one.

pub mod claim;
pub mod classify;
pub mod contract;
pub mod digest;
pub mod egress;
pub mod finish;
pub mod ids;
pub mod operators;
pub mod quota;
pub mod resolve;
pub mod retry;
pub mod session;
pub mod status;
pub mod submission;
pub mod task;
pub mod time;

pub use claim::{call_fits_lease, choose_action, decide_claim, min_lease, ClaimContext, ClaimDecision, ParkReason};
pub use contract::{
    Answers, Capability, ChannelContract, ChannelKind, ChannelRules, OnUnknown, Policy, Promise, QueryConsistency,
    RefusalProof,
};
pub use digest::{decide_digest, DigestDecision, DigestRule, OpenDigest};
pub use egress::{decide_egress, default_guard, deferral, give_back, slot_kept, EgressDecision, SlotWait};
pub use finish::{finish, FinishContext};
pub use ids::{
    check_user_id, AttemptToken, ChannelName, EventKey, IdempotencyKey, NotificationId, NotificationRef, TaskId,
    ThreadKey, UserId, UserIdProblem,
};
pub use quota::{decide_test_send, TestSendQuota};
pub use resolve::{manual_decision, resolve_manually, resolve_manually_at, FinalState, NotParked};
pub use retry::{Jitter, RetryPolicy};
pub use session::{judge_session, session_end, SessionEnd, SessionPolicy, SessionTimes, SessionVerdict};
pub use status::{after_post, PostResult, StatusKind, StatusNext};
pub use task::{Action, Observation, Outcome, TaskSnapshot, TaskState, Transition};
pub use time::{Millis, Timestamp};
