//! CPU time spent by each part of the machine over a phase, from `/proc/PID/stat` (Linux): where a
//! drain's time goes — PostgreSQL, Herald's processes, this harness with its stand-ins, the rest.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// `/proc` counts CPU time in USER_HZ ticks, 100 per second on Linux whatever the kernel's own HZ.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU ticks of every process at one moment, with its command name: its own (user + system) and those
/// of its children that ended and were waited for.
pub struct Snapshot {
    by_pid: HashMap<u32, Ticks>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Ticks {
    comm: String,
    ppid: u32,
    own: u64,
    reaped: u64,
}

/// The postmaster of the server under test, once known ([`measure_server`]): only it and its children
/// count as PostgreSQL, so the backends of another server on the machine (other people's tests) count as
/// other processes.
static POSTMASTER: OnceLock<u32> = OnceLock::new();

/// Counts as PostgreSQL only the server whose backend is `backend_pid` (a connection's
/// `pg_backend_pid()`): its postmaster, read from `/proc`, and the postmaster's children. Without it every
/// process named `postgres` counts.
pub fn measure_server(backend_pid: u32) {
    let parent = std::fs::read_to_string(format!("/proc/{backend_pid}/stat")).ok().and_then(|s| parse_stat(&s));
    if let Some(parent) = parent {
        let _ = POSTMASTER.set(parent.ppid);
    }
}

/// Reads every process's CPU time now.
#[must_use]
pub fn snapshot() -> Snapshot {
    let mut by_pid = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            if let Some(parsed) = parse_stat(&stat) {
                by_pid.insert(pid, parsed);
            }
        }
    }
    Snapshot { by_pid }
}

/// `pid (comm) state ppid …`: the command (which may hold spaces and parentheses), utime + stime (fields
/// 14 and 15) and cutime + cstime (16 and 17: children waited for).
fn parse_stat(stat: &str) -> Option<Ticks> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let ppid: u32 = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let cutime: u64 = fields.get(13)?.parse().ok()?;
    let cstime: u64 = fields.get(14)?.parse().ok()?;
    Some(Ticks { comm, ppid, own: utime + stime, reaped: cutime + cstime })
}

/// CPU seconds by part between two snapshots.
#[derive(Clone, Copy, Debug, Default)]
pub struct Split {
    pub postgres: f64,
    /// Herald's processes (`herald worker`, `herald serve`) or, for a peer, its own processes.
    pub subject: f64,
    /// This harness, with the stand-ins it runs.
    pub harness: f64,
    /// Everything else on the machine.
    pub other: f64,
}

impl Split {
    #[must_use]
    pub fn total(&self) -> f64 {
        self.postgres + self.subject + self.harness + self.other
    }
}

/// The parts of [`Split`].
#[derive(Clone, Copy)]
enum Part {
    Postgres,
    Subject,
    Harness,
    Other,
}

impl Split {
    fn add(&mut self, part: Part, ticks: i64) {
        let secs = ticks as f64 / TICKS_PER_SEC;
        match part {
            Part::Postgres => self.postgres += secs,
            Part::Subject => self.subject += secs,
            Part::Harness => self.harness += secs,
            Part::Other => self.other += secs,
        }
    }
}

/// The CPU seconds spent between `before` and `after`: PostgreSQL's processes (command `postgres`),
/// the processes of `subject` (by pid, or by command name for programs the harness does not start by
/// pid), this process, and the rest. A process that started in between counts from zero. A process that
/// ended in between is counted through its parent, which adds the whole life of a child it waited for to
/// its own children's time: the postmaster for a backend (a peer's connections close with the peer), this
/// process for the programs it runs — the only ones to end within a phase are the subject's (pgbench, a
/// peer's runner) — so what such a process had spent before the phase is taken off again.
#[must_use]
pub fn split(before: &Snapshot, after: &Snapshot, subject_pids: &HashSet<u32>, subject_comm: &str) -> Split {
    let me = std::process::id();
    let postmaster = POSTMASTER.get().copied();
    let ppid_of = |pid: u32| after.by_pid.get(&pid).or_else(|| before.by_pid.get(&pid)).map_or(0, |t| t.ppid);
    let part = |pid: u32, comm: &str| {
        let ours = postmaster.is_none_or(|p| pid == p || ppid_of(pid) == p);
        if comm == "postgres" && ours {
            Part::Postgres
        } else if subject_pids.contains(&pid) || (!subject_comm.is_empty() && comm == subject_comm) {
            Part::Subject
        } else if pid == me {
            Part::Harness
        } else {
            Part::Other
        }
    };
    // Whose are the children a process waited for: the postmaster's are PostgreSQL's, this process's
    // the subject's, anyone else's their parent's kind.
    let reaped_part = |pid: u32, comm: &str| match part(pid, comm) {
        Part::Harness => Part::Subject,
        other => other,
    };
    let same = |pid: &u32, t: &Ticks| before.by_pid.get(pid).filter(|b| b.comm == t.comm);
    let mut s = Split::default();
    for (pid, now) in &after.by_pid {
        let (own, reaped) = same(pid, now).map_or((0, 0), |b| (b.own, b.reaped));
        s.add(part(*pid, &now.comm), now.own.saturating_sub(own) as i64);
        s.add(reaped_part(*pid, &now.comm), now.reaped.saturating_sub(reaped) as i64);
    }
    for (pid, gone) in &before.by_pid {
        if after.by_pid.get(pid).is_some_and(|a| a.comm == gone.comm) {
            continue;
        }
        // Its parent now counts all of it, under the part it belonged to: a backend's under the
        // postmaster's, a subject's under this process's (if it was waited for: otherwise this undercounts).
        s.add(part(*pid, &gone.comm), -((gone.own + gone.reaped) as i64));
    }
    s.postgres = s.postgres.max(0.0);
    s.subject = s.subject.max(0.0);
    s.harness = s.harness.max(0.0);
    s.other = s.other.max(0.0);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_command_and_cpu_ticks() {
        let line = "4242 (tokio (rt) x) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 0 8 0 100 0 0";
        assert_eq!(parse_stat(line), Some(Ticks { comm: "tokio (rt) x".to_owned(), ppid: 1, own: 150, reaped: 0 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    fn snapshot_of(processes: &[(u32, &str, u64, u64)]) -> Snapshot {
        Snapshot {
            by_pid: processes
                .iter()
                .map(|&(pid, comm, own, reaped)| (pid, Ticks { comm: comm.to_owned(), ppid: 0, own, reaped }))
                .collect(),
        }
    }

    #[test]
    fn a_backend_that_ends_within_the_phase_counts_through_the_postmaster_for_its_time_in_the_phase() {
        // Backend 11 had spent 0.40 s before the phase and ended with 0.60 s; backend 12 started and
        // ended within it (0.25 s); backend 13 lives on (0.10 s more). The postmaster waited for both.
        let before = snapshot_of(&[(10, "postgres", 5, 100), (11, "postgres", 40, 0), (13, "postgres", 7, 0)]);
        let after = snapshot_of(&[(10, "postgres", 5, 100 + 60 + 25), (13, "postgres", 17, 0)]);
        let s = split(&before, &after, &HashSet::new(), "");
        assert!((s.postgres - 0.55).abs() < 1e-9, "{s:?}");
        // Without the children's time only the living backend's 0.10 s would be seen.
        assert!(s.harness == 0.0 && s.subject == 0.0 && s.other == 0.0, "{s:?}");
    }

    #[test]
    fn a_program_this_process_ran_to_its_end_counts_as_the_subject() {
        let before = snapshot();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .expect("sh runs");
        assert!(status.success());
        let s = split(&before, &snapshot(), &HashSet::new(), "pgbench");
        assert!(s.subject > 0.1, "{s:?}");
    }

    /// Spins until the snapshots show a tenth of a second of this process's CPU, for at most ten seconds
    /// of wall clock: on a loaded machine a fixed spin may get less CPU than its wall time, and the test is
    /// about the accounting, not about how busy the machine is.
    #[test]
    fn this_process_sees_itself_spend_cpu() {
        let before = snapshot();
        let mut x = 0_u64;
        let started = std::time::Instant::now();
        let mut seen = split(&before, &snapshot(), &HashSet::new(), "");
        while seen.harness <= 0.1 && started.elapsed() < std::time::Duration::from_secs(10) {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            }
            seen = split(&before, &snapshot(), &HashSet::new(), "");
        }
        std::hint::black_box(x);
        assert!(seen.harness > 0.1, "ten seconds of spinning showed no tenth of a second of CPU: {seen:?}");
    }
}
