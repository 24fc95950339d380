//! The worker cycle: claim → call → finish.
