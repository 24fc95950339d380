//! Random ("chaos") behaviour: when no scripted step is queued, a stand-in in chaos mode draws the
//! next step from a seeded RNG with configurable weights, for soaks that need every kind of
//! misbehaviour without scripting each request.
//!
//! The central rule of the stand-in still holds, because a drawn step is executed exactly like a
//! scripted one: an acceptance is recorded before any misbehaviour after it, and a refusal is
//! answered before anything is recorded.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::script::Script;

/// Weights of the behaviours a chaos-mode stand-in draws from (relative; a weight of 0 never
/// happens). Sends draw from the first eight, sms queries from the last two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chaos {
    /// Seed of the stand-in's RNG: the same seed and the same request order give the same draws.
    pub seed: u64,
    /// Accept and answer at once.
    pub accept: u32,
    /// Accept, then answer only after [`Chaos::hang_for`] (longer than the client's timeout, but
    /// finite, so a shutdown stays quick).
    pub hang: u32,
    /// How long an accepted-then-hanging request waits before its answer.
    pub hang_for: Duration,
    /// Refuse with 503 before accepting.
    pub unavailable: u32,
    /// Refuse with 429 (and `Retry-After: 1`) before accepting.
    pub too_many: u32,
    /// Refuse with 410 Gone before accepting: a Web Push subscription that expired (SMTP: a `550` to
    /// `RCPT`). Meant for the Web Push and SMTP stand-ins; [`Chaos::mixed`] leaves it at 0.
    pub gone: u32,
    /// Close the connection before accepting.
    pub drop_before: u32,
    /// Accept, then close the connection without an answer.
    pub drop_after: u32,
    /// Accept, then answer 200 with a body no adapter can parse.
    pub garbage: u32,
    /// Sms queries answered normally.
    pub query_ok: u32,
    /// Sms queries answered 503.
    pub query_fail: u32,
}

impl Chaos {
    /// A mix where most requests succeed and every misbehaviour is regular.
    #[must_use]
    pub fn mixed(seed: u64, hang_for: Duration) -> Self {
        Chaos {
            seed,
            accept: 60,
            hang: 8,
            hang_for,
            unavailable: 8,
            too_many: 6,
            gone: 0,
            drop_before: 6,
            drop_after: 6,
            garbage: 6,
            query_ok: 75,
            query_fail: 25,
        }
    }
}

/// The RNG and weights of a stand-in in chaos mode.
#[derive(Debug)]
pub(crate) struct ChaosState {
    chaos: Chaos,
    rng: StdRng,
    /// How often each behaviour was drawn, in the order of [`DRAW_NAMES`].
    draws: [u64; DRAW_NAMES.len()],
}

/// Names of the drawn behaviours, for [`StandIn::chaos_draws`](super::StandIn::chaos_draws).
pub const DRAW_NAMES: [&str; 9] =
    ["accept", "hang", "503", "429", "drop_before", "drop_after", "garbage", "410", "query_503"];

impl ChaosState {
    pub(crate) fn new(chaos: Chaos) -> Self {
        let rng = StdRng::seed_from_u64(chaos.seed);
        ChaosState { chaos, rng, draws: [0; DRAW_NAMES.len()] }
    }

    /// Draws the step for the next send request.
    pub(crate) fn next_send(&mut self) -> Script {
        let c = &self.chaos;
        let steps = [
            (c.accept, Script::Ok),
            (c.hang, Script::Delay(c.hang_for)),
            (c.unavailable, Script::status(503)),
            (c.too_many, Script::retry_after(429, 1)),
            (c.drop_before, Script::DropBeforeAccept),
            (c.drop_after, Script::DropAfterAccept),
            (c.garbage, Script::Garbage),
            (c.gone, Script::status(410)),
        ];
        let total: u32 = steps.iter().map(|(w, _)| *w).sum();
        if total == 0 {
            return Script::Ok;
        }
        let mut pick = self.rng.gen_range(0..total);
        for (i, (weight, step)) in steps.into_iter().enumerate() {
            if pick < weight {
                self.draws[i] += 1;
                return step;
            }
            pick -= weight;
        }
        Script::Ok
    }

    /// Whether the next sms query fails (503).
    pub(crate) fn next_query_fails(&mut self) -> bool {
        let total = self.chaos.query_ok + self.chaos.query_fail;
        let fails = total > 0 && self.rng.gen_range(0..total) < self.chaos.query_fail;
        if fails {
            self.draws[DRAW_NAMES.len() - 1] += 1;
        }
        fails
    }

    pub(crate) fn draws(&self) -> Vec<(&'static str, u64)> {
        DRAW_NAMES.iter().copied().zip(self.draws.iter().copied()).collect()
    }
}
