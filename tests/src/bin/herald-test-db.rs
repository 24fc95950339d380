//! `herald-test-db drop-leftovers`: drops the test databases and the template that test runs left on the
//! server (`DATABASE_URL`), printing how many; `scripts/test.sh` runs it when a run ends.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = std::env::args().nth(1).unwrap_or_default();
    anyhow::ensure!(command == "drop-leftovers", "usage: herald-test-db drop-leftovers");
    let dropped = herald_tests::db::drop_leftovers().await?;
    eprintln!("test databases: {} dropped", dropped.len());
    Ok(())
}
