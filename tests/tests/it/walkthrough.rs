//! README's walkthrough, as a newcomer pastes it: the real `herald demo` runs (as `scripts/demo.sh` would
//! start it) against the test server, the line it printed under "For the README walkthrough" is pasted into
//! a shell, then every command of the section's `sh` blocks, in order, in that one shell — `herald init`,
//! `migrate`, `serve &`, the curl calls, `review`, `kill %1`. Between commands the test only waits, as a
//! person would (for `serve` to answer, for the miao call to time out), and checks what README says each
//! command shows. A command README drops or renames fails the test, so the walkthrough cannot drift.
//!
//! It uses the fixed ports the walkthrough names (8090 for `serve`, 9001–9003 for the demo's spare
//! stand-ins) and the databases `herald_demo` and `herald_walkthrough` of the test server: runs on one
//! server take turns (an advisory lock), and a taken port fails the test naming it.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_tests::bins::binary;
use herald_tests::db::server_url;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use sqlx::Connection as _;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The ports the walkthrough names: `herald serve` of `herald init`'s configuration, the spare stand-ins.
const FIXED_PORTS: [u16; 4] = [8090, 9001, 9002, 9003];
const BASE: &str = "http://127.0.0.1:8090";
/// Held on the test server while a walkthrough runs: the ports and databases are the same for every run.
const LOCK: i64 = 727_045;
/// The end of each command's output in the shell (with its exit status).
const DONE: &str = "__HERALD_WALKTHROUGH_DONE__";
/// How long one command, or the demo's first run, may take before the test gives up: a guard against a
/// hang, not a timing assertion.
const GUARD: Duration = Duration::from_secs(180);

/// The shell commands of README's "Walkthrough" section, in order: the lines of its `sh` blocks, a line
/// ending in `\` continued by the next, blank lines and comment lines left out.
fn walkthrough_commands(readme: &str) -> Vec<String> {
    let start = readme.find("\n## Walkthrough\n").expect("README has a Walkthrough section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |end| end + 3)];
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current = String::new();
    for line in section.lines() {
        if line.starts_with("```") {
            assert!(current.is_empty(), "a command continues past the end of its block: {current}");
            in_block = line == "```sh";
            continue;
        }
        if !in_block || (current.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#'))) {
            continue;
        }
        current.push_str(line);
        if line.ends_with('\\') {
            current.push('\n');
        } else {
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

/// A child process in a process group of its own, which is killed whole when this is dropped (a failed
/// test leaves neither `herald serve` nor the demo behind on the fixed ports).
struct Group(Child);

impl Group {
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.0.id().expect("running")).expect("a pid"))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Everything a stream says, kept for failure messages.
fn drain(stream: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            text.push_str(&line);
            text.push('\n');
        }
    });
}

fn text_of(buffer: &Arc<Mutex<String>>) -> String {
    buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// One bash, fed command after command as a person pastes them into a terminal.
struct Shell {
    _group: Group,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
}

impl Shell {
    fn start(dir: &Path) -> Shell {
        let mut command = std::process::Command::new("bash");
        command
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            // A fresh terminal: none of the test run's own Herald settings.
            .env_remove("HERALD_CONFIG")
            .env_remove("HERALD__DATABASE__URL")
            .env_remove("DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = Command::from(command).kill_on_drop(true).spawn().expect("bash starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        drain(child.stderr.take().expect("stderr"), Arc::clone(&stderr));
        Shell { _group: Group(child), stdin, stdout, stderr }
    }

    /// Runs `command` as pasted; its exit status and standard output.
    async fn run(&mut self, command: &str) -> (i32, String) {
        let script = format!("{command}\nprintf '\\n{DONE} %s\\n' \"$?\"\n");
        self.stdin.write_all(script.as_bytes()).await.expect("the shell reads");
        let mut output = String::new();
        let (stdout, stderr) = (&mut self.stdout, Arc::clone(&self.stderr));
        let read = tokio::time::timeout(GUARD, async {
            while let Some(line) = stdout.next_line().await.expect("the shell's output") {
                if let Some(status) = line.strip_prefix(&format!("{DONE} ")) {
                    return status.trim().parse::<i32>().expect("a status");
                }
                output.push_str(&line);
                output.push('\n');
            }
            panic!("the shell ended during `{command}`; its errors:\n{}", text_of(&stderr));
        })
        .await;
        let Ok(status) = read else {
            panic!("`{command}` did not finish within {} s; errors:\n{}", GUARD.as_secs(), text_of(&self.stderr))
        };
        (status, output.trim().to_owned())
    }

    /// As [`Shell::run`], for a command that must succeed.
    async fn ok(&mut self, command: &str) -> String {
        let (status, output) = self.run(command).await;
        assert_eq!(status, 0, "`{command}` failed: {output}\nerrors:\n{}", text_of(&self.stderr));
        output
    }
}

fn json(command: &str, output: &str) -> Value {
    serde_json::from_str(output).unwrap_or_else(|_| panic!("`{command}` answered no JSON: {output}"))
}

fn task<'a>(notification: &'a Value, channel: &str) -> &'a Value {
    notification["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["channel"] == channel))
        .unwrap_or_else(|| panic!("no {channel} task in {notification}"))
}

async fn answers_ready() -> bool {
    reqwest::get(format!("{BASE}/readyz")).await.is_ok_and(|r| r.status().is_success())
}

/// Waits until nothing listens on the walkthrough's ports (a run before this one may still be stopping).
async fn fixed_ports_free() {
    for port in FIXED_PORTS {
        let mut free = false;
        for _ in 0..60 {
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                free = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(free, "port {port} is taken: the walkthrough needs it (does a demo or a `herald serve` run here?)");
    }
}

/// The walkthrough's programs where its commands name them (`target/debug/herald`), in a folder of the test's
/// own: the repository's folder is left untouched.
fn tour_folder() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("herald-walkthrough-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/debug")).expect("tour folder");
    std::os::unix::fs::symlink(binary("herald"), dir.join("target/debug/herald")).expect("link herald");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_runs_as_pasted() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("README");
    let commands = walkthrough_commands(&readme);
    assert!(commands.len() >= 10, "the walkthrough's commands: {commands:#?}");
    let _ = binary("herald-demo");
    let dir = tour_folder();

    let mut admin = sqlx::PgConnection::connect(&server_url()).await.expect("the test server answers");
    sqlx::query("SELECT pg_advisory_lock($1)").bind(LOCK).execute(&mut admin).await.expect("the walkthrough's turn");
    fixed_ports_free().await;

    // The first terminal: the demo, as scripts/demo.sh runs it, until it serves.
    let mut demo = std::process::Command::new(binary("herald"));
    demo.arg("demo")
        .current_dir(&dir)
        .env("DATABASE_URL", server_url())
        .env_remove("HERALD_CONFIG")
        .env_remove("HERALD__DATABASE__URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut demo = Group(Command::from(demo).kill_on_drop(true).spawn().expect("herald demo starts"));
    let demo_errors = Arc::new(Mutex::new(String::new()));
    drain(demo.0.stderr.take().expect("stderr"), Arc::clone(&demo_errors));
    let mut demo_lines = BufReader::new(demo.0.stdout.take().expect("stdout")).lines();
    let mut printed = String::new();
    let serving = tokio::time::timeout(GUARD, async {
        while let Some(line) = demo_lines.next_line().await.expect("the demo's output") {
            printed.push_str(&line);
            printed.push('\n');
            if line.contains("ctrl-c stops them") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(serving, Ok(true)),
        "the demo did not come to serve:\n{printed}\nerrors:\n{}",
        text_of(&demo_errors)
    );
    let demo_output = Arc::new(Mutex::new(String::new()));
    drain(demo_lines.into_inner(), Arc::clone(&demo_output));
    assert!(printed.contains("Spare stand-ins for your own tries"), "the spare stand-ins run:\n{printed}");
    let (_, after) = printed.split_once("For the README walkthrough").expect("the demo prints the walkthrough's line");
    let pasted = after.lines().nth(1).expect("a line to paste").trim().to_owned();
    assert!(
        pasted.starts_with("export HERALD__DATABASE__URL=postgres://") && pasted.ends_with("/herald_walkthrough"),
        "{pasted}"
    );
    assert!(readme.contains("HERALD__DATABASE__URL=postgres://postgres@127.0.0.1:5432/herald_walkthrough"));

    // The second terminal: the line the demo printed, then every command of the section.
    let mut shell = Shell::start(&dir);
    shell.ok(&pasted).await;
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for command in &commands {
        let step = step_of(command);
        *seen.entry(step).or_default() += 1;
        match step {
            "migrate" => {
                let output = shell.ok(command).await;
                assert!(output.contains("created database herald_walkthrough on postgres://"), "{output}");
                assert!(output.contains("migrations applied"), "{output}");
            }
            "serve" => {
                shell.ok(command).await;
                // A person reads on while it starts; the test waits for it to answer.
                herald_tests::wait::wait_until("herald serve to answer on 127.0.0.1:8090", answers_ready).await;
            }
            "channel" => {
                let answer = json(command, &shell.ok(command).await);
                assert_eq!(
                    (&answer["has_destination"], &answer["verified"]),
                    (&Value::Bool(true), &Value::Bool(false))
                );
                assert_eq!(answer["enabled"], true, "{answer}");
                assert!(!answer.to_string().contains("late000"), "a destination is never answered: {answer}");
            }
            "submit" => {
                let first = json(command, &shell.ok(command).await);
                assert_eq!(first["created"], true, "{first}");
                // "the same submit again answers 200 created: false with the same notification"
                let again = json(command, &shell.ok(command).await);
                assert_eq!(again["created"], false, "{again}");
                assert_eq!(again["notification_id"], first["notification_id"]);
            }
            "notification" => {
                let mut answer = json(command, &shell.ok(command).await);
                assert!(
                    uuid::Uuid::parse_str(answer["notification_id"].as_str().unwrap_or("")).is_ok(),
                    "an opaque id: {answer}"
                );
                // "Watch it": run again as a person would, until miao's call has timed out.
                for _ in 0..60 {
                    if task(&answer, "miao")["state"] == "UNKNOWN" {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    answer = json(command, &shell.ok(command).await);
                }
                assert_eq!(task(&answer, "push")["state"], "SENT", "{answer}");
                let miao = task(&answer, "miao");
                assert_eq!(miao["state"], "UNKNOWN", "{answer}");
                assert_eq!((&miao["needs_review"], &miao["parked"]), (&Value::Bool(true), &Value::Bool(true)));
            }
            "review api" => {
                let answer = shell.ok(command).await;
                assert!(answer.contains("\"task_id\":2") && answer.contains("\"channel\":\"miao\""), "{answer}");
            }
            "review list" => {
                let output = shell.ok(command).await;
                let line = output.lines().find(|l| l.starts_with("2\t")).unwrap_or_else(|| panic!("{output}"));
                assert!(line.contains("\talice\tmiao\t"), "task 2 is alice's miao task: {output}");
            }
            "resolve" => {
                let output = shell.ok(command).await;
                assert!(output.contains("task 2 is now SENT"), "{output}");
                // "Resolving is allowed once; a second call changes nothing and says so."
                let (status, output) = shell.run(&format!("{command} 2>&1")).await;
                assert_ne!(status, 0, "{output}");
                assert!(output.contains("nothing changed"), "{output}");
            }
            "inbox" => {
                let output = shell.ok(command).await;
                assert!(
                    output.contains("marked sent by an operator: alice confirmed the reminder arrived"),
                    "{output}"
                );
            }
            "kill" => {
                shell.ok(command).await;
                herald_tests::wait::wait_until("herald serve to stop", || async { !answers_ready().await }).await;
            }
            _ => {
                shell.ok(command).await;
            }
        }
    }
    let expected = [
        ("channel", 2),
        ("inbox", 1),
        ("init", 1),
        ("kill", 1),
        ("migrate", 1),
        ("notification", 1),
        ("resolve", 1),
        ("review api", 1),
        ("review list", 1),
        ("serve", 1),
        ("submit", 1),
    ];
    for (step, count) in expected {
        assert_eq!(seen.get(step), Some(&count), "README's walkthrough: step {step}; seen {seen:?}");
    }
    assert!(dir.join("walkthrough/herald.toml").is_file(), "herald init wrote its configuration");
    drop(shell);

    // ctrl-c in the first terminal.
    killpg(demo.pid(), Signal::SIGINT).expect("ctrl-c");
    let status = tokio::time::timeout(GUARD, demo.0.wait()).await.expect("the demo stops").expect("its status");
    assert!(status.success(), "{}\nerrors:\n{}", text_of(&demo_output), text_of(&demo_errors));

    for database in ["herald_walkthrough", herald_demo::DEMO_DATABASE] {
        sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .expect("drop");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Which step of the walkthrough `command` is, by what it does (the checks above know each step).
fn step_of(command: &str) -> &'static str {
    let words = command.split_whitespace().collect::<Vec<_>>();
    let herald = |args: &[&str]| words.first() == Some(&"target/debug/herald") && words[1..].starts_with(args);
    let curl = |parts: &[&str]| words.first() == Some(&"curl") && parts.iter().all(|part| command.contains(part));
    if herald(&["init"]) {
        "init"
    } else if herald(&["migrate"]) {
        "migrate"
    } else if herald(&["serve"]) {
        "serve"
    } else if herald(&["review", "list"]) {
        "review list"
    } else if herald(&["review", "resolve"]) {
        "resolve"
    } else if curl(&["-X PUT", "/channels/"]) {
        "channel"
    } else if curl(&["-X POST", "/v1/notifications "]) {
        "submit"
    } else if curl(&["/v1/notifications/"]) {
        "notification"
    } else if curl(&["/v1/review"]) {
        "review api"
    } else if curl(&["/inbox"]) {
        "inbox"
    } else if words.first() == Some(&"kill") {
        "kill"
    } else {
        "other"
    }
}

#[test]
fn the_walkthrough_commands_are_read_from_the_readme_blocks() {
    let readme = "# x\n\n## Walkthrough\n\ntext `not this`\n\n```sh\na --one   # note\n# comment\n\nb \\\n  c\n```\n\n\
                  ```toml\nnot = 1\n```\n\n```sh\nd\n```\n\n## Next\n\n```sh\ne\n```\n";
    assert_eq!(walkthrough_commands(readme), ["a --one   # note", "b \\\n  c", "d"]);
}
