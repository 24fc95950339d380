//! The generated input of one case: the channel setup and the sequence of operations.
//!
//! Every operation names what it acts on by a small number that is taken modulo whatever exists when
//! it runs (`holder 3` = the 3rd, wrapping, of the attempts not yet finished), so any subsequence of a
//! case is still a valid case: that is what lets proptest shrink a failure to a short sequence.

use std::fmt;

use herald_domain::resolve::FinalState;
use herald_domain::{Jitter, Millis, Observation};
use proptest::prelude::*;

/// Users, channels and event keys are drawn from small sets so that duplicates, several tasks per
/// notification and several notifications per user are common.
pub const USERS: u8 = 3;
pub const EVENTS: u8 = 6;
/// `push` (webhook, idempotent), `sms` (queryable), `miao` (Miaotixing: neither key nor query).
pub const CHANNELS: usize = 3;

/// The channel configuration of one case.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Each channel's attempt budget (a notification may override it).
    pub budgets: [u32; CHANNELS],
    /// Each channel's retry base, in ms (the cap is 8 × the base).
    pub retry_base_ms: [u64; CHANNELS],
    /// `sms`: a "not found" is believed at once (`None`) or only this long after the uncertain call.
    pub sms_consistency_ms: Option<u64>,
    /// Each channel's global egress interval in ms (`None`: not rate-limited); the guard is the default.
    pub intervals_ms: [Option<u64>; CHANNELS],
    /// The preference row of each user and channel at the start: none, off or on.
    pub prefs: [[Option<bool>; CHANNELS]; USERS as usize],
}

/// The arguments of one claim transaction.
#[derive(Clone, Copy)]
pub struct ClaimArgs {
    pub worker: u8,
    pub limit: u8,
    pub lease_ms: u32,
    /// Which channels this worker claims for (bit i = channel i); 0 is read as "all".
    pub channels: u8,
}

/// One step of a case.
#[derive(Clone)]
pub enum Op {
    /// `create` at the current time; `max_attempts` overrides the channel budget.
    Create { user: u8, event: u8, ttl_ms: u32, max_attempts: Option<u8> },
    /// One claim transaction at the current time.
    Claim(ClaimArgs),
    /// Two claim transactions at the current time, run concurrently (`FOR UPDATE … SKIP LOCKED`).
    ClaimPair(ClaimArgs, ClaimArgs),
    /// The holder of an attempt not finished yet reports an observation (applied, or late if superseded).
    Finish { holder: u8, obs: Obs, jitter: Option<u64> },
    /// A finish of an attempt that was finished already: with `same`, exactly the finish sent last (a
    /// retried finish whose answer was lost: it changes nothing); otherwise a new observation (late).
    FinishAgain { holder: u8, obs: Obs, same: bool },
    /// A finish and a claim at the same time: either order is allowed, the result says which happened.
    Race { holder: u8, obs: Obs, claim: ClaimArgs },
    /// The holder of an attempt not finished yet gives it back without calling (`egress::give_back`).
    GiveBack { holder: u8 },
    /// The clock moves forward.
    Tick { ms: u32 },
    /// The clock jumps to a moment something becomes due, ends or expires, give or take a millisecond.
    Jump { pick: u8, offset: i8 },
    /// A human resolves a task as SENT, FAILED or RESEND (`answer` modulo 3): a parked one, one resolved
    /// before (refused), or any (then a task that is not parked is refused). Falls back to any task when
    /// there is none of the kind.
    Resolve { task: u8, answer: u8, pick: ResolvePick },
    /// A user switches a channel on or off (creating the preference row if needed).
    SetPref { user: u8, channel: u8, enabled: bool },
}

/// Which task a resolution picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvePick {
    Parked,
    ResolvedBefore,
    Any,
}

/// An observation, drawn independently of the attempt's action: the store must keep whatever it is given.
#[derive(Clone, Copy)]
pub struct Obs {
    pub kind: u8,
    pub retry_after_ms: Option<u16>,
    pub with_id: bool,
}

impl Obs {
    /// The observation; `n` makes provider message ids distinct.
    pub fn observation(self, n: usize) -> Observation {
        let id = self.with_id.then(|| format!("m-{n}"));
        match self.kind % 9 {
            0 => Observation::Accepted { provider_msg_id: id },
            1 => Observation::AcceptedReplay { provider_msg_id: id },
            2 => Observation::QueryFound { provider_msg_id: id },
            3 => Observation::QueryNotFound,
            4 => Observation::Timeout,
            5 => Observation::IoError,
            6 => Observation::QueryFailed,
            7 => Observation::RetryableReject { retry_after: self.retry_after_ms.map(|ms| Millis(u64::from(ms))) },
            _ => Observation::Rejected,
        }
    }
}

pub fn final_state(answer: u8) -> FinalState {
    match answer % 3 {
        0 => FinalState::Sent,
        1 => FinalState::Failed,
        _ => FinalState::Resend,
    }
}

pub fn jitter(bits: Option<u64>) -> Jitter {
    bits.map_or(Jitter::NONE, Jitter::from_bits)
}

impl ClaimArgs {
    /// The channel indices this claim covers.
    pub fn channel_set(self) -> Vec<usize> {
        let mask = if self.channels & 0b111 == 0 { 0b111 } else { self.channels };
        (0..CHANNELS).filter(|i| mask & (1 << i) != 0).collect()
    }
}

impl fmt::Debug for ClaimArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.channel_set().into_iter().map(|i| ["push", "sms", "miao"][i]).collect();
        write!(f, "w{} limit {} lease {}ms [{}]", self.worker, self.limit, self.lease_ms, names.join(","))
    }
}

impl fmt::Debug for Obs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.observation(0).outcome())?;
        if self.kind % 9 == 7 {
            if let Some(ms) = self.retry_after_ms {
                write!(f, " retry-after {ms}ms")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { user, event, ttl_ms, max_attempts } => {
                write!(f, "create u{user} e{event} ttl {ttl_ms}ms")?;
                if let Some(max) = max_attempts {
                    write!(f, " max_attempts {max}")?;
                }
                Ok(())
            }
            Op::Claim(args) => write!(f, "claim {args:?}"),
            Op::ClaimPair(a, b) => write!(f, "claim concurrently {a:?} | {b:?}"),
            Op::Finish { holder, obs, jitter } => {
                write!(f, "finish holder {holder} {obs:?}")?;
                if jitter.is_some() {
                    write!(f, " (jitter {:.3})", self::jitter(*jitter).fraction())?;
                }
                Ok(())
            }
            Op::FinishAgain { holder, same: true, .. } => {
                write!(f, "repeat the last finish of finished holder {holder}")
            }
            Op::FinishAgain { holder, obs, .. } => write!(f, "finish again finished holder {holder} {obs:?}"),
            Op::Race { holder, obs, claim } => write!(f, "race finish holder {holder} {obs:?} | claim {claim:?}"),
            Op::GiveBack { holder } => write!(f, "give back holder {holder}"),
            Op::Tick { ms } => write!(f, "tick {ms}ms"),
            Op::Jump { pick, offset } => write!(f, "jump to due moment {pick} {offset:+}ms"),
            Op::Resolve { task, answer, pick } => write!(
                f,
                "resolve {} task {task} as {}",
                match pick {
                    ResolvePick::Parked => "parked",
                    ResolvePick::ResolvedBefore => "resolved-before",
                    ResolvePick::Any => "any",
                },
                final_state(*answer).as_str()
            ),
            Op::SetPref { user, channel, enabled } => write!(
                f,
                "switch u{user} {} {}",
                ["push", "sms", "miao"][usize::from(*channel) % CHANNELS],
                if *enabled { "on" } else { "off" }
            ),
        }
    }
}

fn claim_args() -> impl Strategy<Value = ClaimArgs> {
    (0u8..3, 1u8..=4, 500u32..4_000, prop_oneof![3 => Just(0u8), 1 => 1u8..8])
        .prop_map(|(worker, limit, lease_ms, channels)| ClaimArgs { worker, limit, lease_ms, channels })
}

fn obs() -> impl Strategy<Value = Obs> {
    (any::<u8>(), proptest::option::of(0u16..6_000), prop::bool::weighted(0.7))
        .prop_map(|(kind, retry_after_ms, with_id)| Obs { kind, retry_after_ms, with_id })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..USERS, 0..EVENTS, prop_oneof![1 => 0u32..2_000, 3 => 2_000u32..30_000], proptest::option::weighted(0.4, 1u8..=4))
            .prop_map(|(user, event, ttl_ms, max_attempts)| Op::Create { user, event, ttl_ms, max_attempts }),
        5 => claim_args().prop_map(Op::Claim),
        1 => (claim_args(), claim_args()).prop_map(|(a, b)| Op::ClaimPair(a, b)),
        5 => (any::<u8>(), obs(), proptest::option::weighted(0.5, any::<u64>()))
            .prop_map(|(holder, obs, jitter)| Op::Finish { holder, obs, jitter }),
        2 => (any::<u8>(), obs(), any::<bool>()).prop_map(|(holder, obs, same)| Op::FinishAgain { holder, obs, same }),
        1 => (any::<u8>(), obs(), claim_args()).prop_map(|(holder, obs, claim)| Op::Race { holder, obs, claim }),
        1 => any::<u8>().prop_map(|holder| Op::GiveBack { holder }),
        3 => prop_oneof![0u32..1_500, 1_500u32..12_000].prop_map(|ms| Op::Tick { ms }),
        2 => (any::<u8>(), -1i8..=1).prop_map(|(pick, offset)| Op::Jump { pick, offset }),
        2 => (
            any::<u8>(),
            any::<u8>(),
            prop_oneof![4 => Just(ResolvePick::Parked), 1 => Just(ResolvePick::ResolvedBefore), 1 => Just(ResolvePick::Any)]
        )
            .prop_map(|(task, answer, pick)| Op::Resolve { task, answer, pick }),
        1 => (0..USERS, 0u8..3, prop::bool::weighted(0.4))
            .prop_map(|(user, channel, enabled)| Op::SetPref { user, channel, enabled }),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    let pref = prop_oneof![1 => Just(None), 1 => Just(Some(false)), 4 => Just(Some(true))];
    let user = [pref.clone(), pref.clone(), pref];
    (
        [1u32..=4, 1u32..=4, 1u32..=4],
        [100u64..2_000, 100u64..2_000, 100u64..2_000],
        proptest::option::of(1u64..5_000),
        [
            proptest::option::weighted(0.25, 200u64..3_000),
            proptest::option::weighted(0.25, 200u64..3_000),
            proptest::option::weighted(0.25, 200u64..3_000),
        ],
        [user.clone(), user.clone(), user],
    )
        .prop_map(|(budgets, retry_base_ms, sms_consistency_ms, intervals_ms, prefs)| Setup {
            budgets,
            retry_base_ms,
            sms_consistency_ms,
            intervals_ms,
            prefs,
        })
}

/// One case: a setup and up to `max_steps` operations.
#[derive(Clone, Debug)]
pub struct Case {
    pub setup: Setup,
    pub ops: Vec<Op>,
}

pub fn case(max_steps: usize) -> impl Strategy<Value = Case> {
    (setup(), proptest::collection::vec(op(), 1..=max_steps)).prop_map(|(setup, ops)| Case { setup, ops })
}
