//! Evidence: each reference case records its checks with expected and actual values, so the same run
//! can fail a test or print a readable report.

use std::fmt::Debug;

#[derive(Clone, Debug)]
pub struct Check {
    pub what: String,
    pub expected: String,
    pub actual: String,
    pub ok: bool,
}

#[derive(Clone, Debug)]
pub struct Evidence {
    pub case: &'static str,
    pub title: &'static str,
    pub checks: Vec<Check>,
}

impl Evidence {
    #[must_use]
    pub fn new(case: &'static str, title: &'static str) -> Self {
        Evidence { case, title, checks: Vec::new() }
    }

    /// Records that `actual` should equal `expected`.
    pub fn eq<T: Debug + PartialEq>(&mut self, what: &str, expected: T, actual: T) {
        let ok = expected == actual;
        self.checks.push(Check {
            what: what.to_owned(),
            expected: format!("{expected:?}"),
            actual: format!("{actual:?}"),
            ok,
        });
    }

    /// Records a condition described by `expected` (what should hold) and `actual` (what was seen).
    pub fn that(&mut self, what: &str, ok: bool, expected: &str, actual: impl Debug) {
        self.checks.push(Check {
            what: what.to_owned(),
            expected: expected.to_owned(),
            actual: format!("{actual:?}"),
            ok,
        });
    }

    #[must_use]
    pub fn passed(&self) -> usize {
        self.checks.iter().filter(|c| c.ok).count()
    }

    #[must_use]
    pub fn failed(&self) -> usize {
        self.checks.len() - self.passed()
    }

    /// The report of this case, one line per check.
    #[must_use]
    pub fn report(&self) -> String {
        let mut out = format!("{} — {}\n", self.case, self.title);
        for c in &self.checks {
            let mark = if c.ok { "ok  " } else { "FAIL" };
            out.push_str(&format!("  {mark} {}: expected {}, actual {}\n", c.what, c.expected, c.actual));
        }
        out
    }

    /// Panics with the report unless every check passed (and there was at least one).
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(!self.checks.is_empty(), "{} recorded no checks", self.case);
        assert!(self.failed() == 0, "{}", self.report());
    }
}
