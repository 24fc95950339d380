//! Finding the workspace's programs, written once: `herald`, `herald-demo`, `herald-test-worker`,
//! `herald-soak` … are looked up beside the running test's own executable, in the same target folder and
//! profile (`target/debug/…` under `cargo test`), after cargo has brought them up to date.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The package each program belongs to.
fn package_of(name: &str) -> &'static str {
    match name {
        "herald" => "herald-app",
        "herald-demo" => "herald-demo",
        _ => "herald-tests",
    }
}

/// The target folder of the running executable's profile (`target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's path");
    let mut dir = exe.parent().expect("a folder").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// The programs built (or found up to date) by this test process.
static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The path of the workspace program `name`, brought up to date first: a narrowed run (`cargo test -p
/// herald-tests`) does not rebuild other packages' programs, and a stale `herald` would test old code. The
/// build runs once per test process and is a quick no-op when nothing changed.
///
/// # Panics
/// When it cannot be built.
#[must_use]
pub fn binary(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    let mut built = BUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|b| b == name) {
        let release = profile_dir().file_name().is_some_and(|n| n == "release");
        let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo.args(["build", "-q", "-p", package_of(name), "--bin", name]);
        if package_of(name) == "herald-app" {
            // The binary under test knows the test kind `echo`, as the tests' own crates do.
            cargo.args(["--features", "test-kind"]);
        }
        if release {
            cargo.arg("--release");
        }
        let status = cargo.status().unwrap_or_else(|e| panic!("cannot run cargo to build {name}: {e}"));
        assert!(status.success(), "cargo could not build {name}");
        built.push(name.to_owned());
    }
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The path of example `name` of package `package` (`target/debug/examples/{name}`), built first.
///
/// # Panics
/// When it cannot be built.
#[must_use]
pub fn example(package: &str, name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    let release = profile_dir().file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.args(["build", "-q", "-p", package, "--example", name]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().unwrap_or_else(|e| panic!("cannot run cargo to build example {name}: {e}"));
    assert!(status.success(), "cargo could not build example {name}");
    assert!(path.is_file(), "{} was not built", path.display());
    path
}
