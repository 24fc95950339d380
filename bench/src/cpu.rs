//! CPU time spent by each part of the machine over a phase, from `/proc/PID/stat` (Linux): where a
//! drain's time goes — PostgreSQL, Herald's processes, this harness with its stand-ins, the rest.

use std::collections::{HashMap, HashSet};

/// `/proc` counts CPU time in USER_HZ ticks, 100 per second on Linux whatever the kernel's own HZ.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU ticks (user + system) of every process at one moment, with its command name.
pub struct Snapshot {
    by_pid: HashMap<u32, (String, u64)>,
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

/// `pid (comm) state ppid …`: the command (which may hold spaces and parentheses) and utime + stime,
/// fields 14 and 15.
fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
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

/// The CPU seconds spent between `before` and `after`: PostgreSQL's processes (command `postgres`),
/// the processes of `subject` (by pid, or by command name for programs the harness does not start by
/// pid), this process, and the rest. A process that started in between counts from zero; one that
/// ended in between is not seen (take `after` before stopping the subject).
#[must_use]
pub fn split(before: &Snapshot, after: &Snapshot, subject_pids: &HashSet<u32>, subject_comm: &str) -> Split {
    let me = std::process::id();
    let mut s = Split::default();
    for (pid, (comm, ticks)) in &after.by_pid {
        let earlier = before.by_pid.get(pid).filter(|(c, _)| c == comm).map_or(0, |(_, t)| *t);
        let secs = ticks.saturating_sub(earlier) as f64 / TICKS_PER_SEC;
        if comm == "postgres" {
            s.postgres += secs;
        } else if subject_pids.contains(pid) || (!subject_comm.is_empty() && comm == subject_comm) {
            s.subject += secs;
        } else if *pid == me {
            s.harness += secs;
        } else {
            s.other += secs;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_command_and_cpu_ticks() {
        let line = "4242 (tokio (rt) x) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 0 8 0 100 0 0";
        assert_eq!(parse_stat(line), Some(("tokio (rt) x".to_owned(), 150)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_sees_itself_spend_cpu() {
        let before = snapshot();
        let mut x = 0_u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let s = split(&before, &snapshot(), &HashSet::new(), "");
        assert!(s.harness > 0.1, "{s:?}");
    }
}
