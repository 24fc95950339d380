//! The evidence report: runs every reference case of SPEC §10 against real PostgreSQL and real HTTP and
//! prints each check with its expected and actual value, ending in `N passed, N failed`.
//!
//! `scripts/evidence.sh` provides the database and builds the worker process binary first.

use herald_tests::cases;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (mut passed, mut failed) = (0, 0);
    for (id, case) in cases::all() {
        match case().await {
            Ok(evidence) => {
                print!("{}", evidence.report());
                passed += evidence.passed();
                failed += evidence.failed();
            }
            Err(error) => {
                println!("{id} — could not run: {error:#}");
                failed += 1;
            }
        }
        println!();
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
