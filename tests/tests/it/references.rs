//! Task references are unique beyond one database: two installations sharing one idempotent channel
//! must not have their notifications taken for replays of each other's.

use herald_domain::TaskState;
use herald_tests::{ClockMode, World};

const HOUR: u64 = 3_600_000;

#[tokio::test]
async fn two_installations_sharing_a_webhook_each_get_their_own_send() {
    let first = World::new(ClockMode::Manual).await.expect("first world");
    let shared_push = first.push.base_url();
    let second = World::with(ClockMode::Manual, |configs| {
        configs.iter_mut().filter(|c| c.name == "push").for_each(|c| c.url.clone_from(&shared_push));
    })
    .await
    .expect("second world");

    let mut tasks = Vec::new();
    for world in [&first, &second] {
        world.user("u1", &["push"]).await.expect("user");
        let created = world.submit("u1", "same-event", HOUR, None).await.expect("submit");
        world.worker("w1", 60_000).drain(5).await.expect("drain");
        let view = world.task(created.notification_id, created.tasks[0].task_id).await.expect("task");
        tasks.push(view);
    }
    // Both databases numbered their first task 1; only the reference tells them apart.
    assert_eq!(tasks[0].task_id, tasks[1].task_id, "the collision this test is about needs equal task ids");
    assert_ne!(tasks[0].reference, tasks[1].reference);
    for view in &tasks {
        assert_eq!(view.state, TaskState::Sent);
        assert_eq!(herald_tests::cases::outcomes(view), ["ACCEPTED"], "a fresh send, not a replay of the other's");
        assert_eq!(first.push.sends_for(&view.reference), 1);
    }
    assert_eq!(first.push.sends(), 2, "each installation's notification was really sent");
}

/// References and attempt tokens (migration `0013`) and notifications' public ids (`0014`) are version 7
/// UUIDs: minted later, they sort later, so the index entries of the notifications and tasks being written
/// now share the right-hand leaves of their indexes instead of landing on random pages of a big one.
#[tokio::test]
async fn references_attempt_tokens_and_public_ids_are_time_ordered() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let mut created = Vec::new();
    for n in 0..3 {
        created.push(world.submit("u1", &format!("ordered-{n}"), HOUR, None).await.expect("submit"));
        // Version 7 orders by the millisecond; within one the rest is random.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    world.worker("w1", 60_000).drain(5).await.expect("drain");
    let rows: Vec<(uuid::Uuid, uuid::Uuid)> = sqlx::query_as(
        "SELECT t.reference, a.attempt_token FROM delivery_task t \
         JOIN delivery_attempt a ON a.user_id = t.user_id AND a.task_id = t.id \
         WHERE t.user_id = 'u1' ORDER BY t.id",
    )
    .fetch_all(world.store.pool())
    .await
    .expect("keys");
    assert_eq!(rows.len(), 3, "one task and one attempt per notification");
    for (reference, token) in &rows {
        assert_eq!(reference.get_version_num(), 7, "reference {reference}");
        assert_eq!(token.get_version_num(), 7, "attempt token {token}");
        assert_eq!(reference.get_variant(), uuid::Variant::RFC4122);
    }
    let references: Vec<uuid::Uuid> = rows.iter().map(|r| r.0).collect();
    assert!(references.is_sorted(), "references follow creation order: {references:?}");
    // The time inside is the database's clock at creation, not a constant.
    let (secs, _) = references[0].get_timestamp().expect("a version 7 UUID has a time").to_unix();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    assert!(now.abs_diff(secs) < 600, "minted at {secs} s, now {now} s");
    let views: Vec<String> = created.iter().map(|c| c.tasks[0].reference.clone()).collect();
    assert_eq!(
        views,
        references.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "creation answers with the same references"
    );

    let public_ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT public_id FROM notification WHERE user_id = 'u1' ORDER BY id")
            .fetch_all(world.store.pool())
            .await
            .expect("public ids");
    assert_eq!(public_ids.len(), 3);
    for id in &public_ids {
        assert_eq!(id.get_version_num(), 7, "public id {id}");
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
    }
    assert!(public_ids.is_sorted(), "public ids follow creation order: {public_ids:?}");
    assert_eq!(
        created.iter().map(|c| c.notification_ref.0).collect::<Vec<_>>(),
        public_ids,
        "creation answers with the public ids"
    );
}
