//! The core as a building block (issue 41): `herald-core`'s example — a team's own channel, Herald's
//! PostgreSQL store, use cases and worker in one program, no HTTP server — is built and run against a
//! database of its own, and its story must end as told.

#[tokio::test]
async fn the_embedding_example_runs_the_core_in_process_with_a_channel_of_its_own() {
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let program = herald_tests::bins::example("herald-core", "embedded");
    let output =
        tokio::process::Command::new(program).env("DATABASE_URL", &db.url).output().await.expect("the example runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("destination must be a chat handle"), "the team's channel checked the destination: {text}");
    assert!(text.contains("created true, then created false"), "{text}");
    assert!(text.contains("task on chat: SENT (1 attempt"), "{text}");
    assert!(text.contains("the chat delivered 1 message(s)"), "{text}");
    assert!(text.ends_with("embedded: as told\n"), "{text}");
    let stored: i64 = db.count("SELECT count(*) FROM notification").await.expect("count");
    assert_eq!(stored, 1, "the example wrote into the database it was given");
}
