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
