//! The audit trail (issue 43): every human act writes one row in the transaction of the act — a decision
//! (with its actor on the timeline and in `resolution.by`), a test send on a user's behalf, a key
//! rotation, an operator's sign-in and sign-out — and a refused or conflicting act writes none. The rows
//! cannot be changed or removed, not even by a superuser's plain UPDATE or DELETE. `GET /v1/audit` and
//! `/console/audit` list them, filtered, for the roles with `view_audit`.

use herald_domain::operators::Role;
use herald_tests::api::Written;
use herald_tests::console::{form_value, Console};
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::json;

use crate::roles::{parked, start, token};

async fn events(world: &World) -> Vec<(String, String, String, String)> {
    sqlx::query_as("SELECT actor_name, action, target, detail FROM audit_event ORDER BY id")
        .fetch_all(world.store.pool())
        .await
        .expect("audit_event")
}

#[tokio::test]
async fn every_human_act_writes_one_row_with_its_actor_and_a_refused_one_none() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    let users: Vec<String> = ["ana", "ben", "cai"].map(str::to_owned).to_vec();
    let tasks = parked(&world, &users).await;
    world.user("dee", &["push"]).await.expect("user");
    assert!(events(&world).await.is_empty(), "deliveries are no human act");

    // A decision through the API, by a named token.
    let (notification, task) = tasks[0].clone();
    let answer = api
        .post(
            &format!("/v1/tasks/{}/resolve", task.0),
            Some(token(Role::Admin)),
            &json!({"final_state": "SENT", "note": "seen in the provider's log"}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let view =
        api.get(&format!("/v1/notifications/{notification}"), Some(token(Role::Viewer))).await.ok(StatusCode::OK);
    let resolution = &view["tasks"][0]["resolution"];
    assert_eq!(resolution["by"], "token lead admin", "{view}");
    assert_eq!(resolution["text"], "marked sent by an operator: seen in the provider's log", "a user's words too");

    // The same task again: a conflict, nothing written — the row is the act's, in its transaction.
    let again = api
        .post(
            &format!("/v1/tasks/{}/resolve", task.0),
            Some(token(Role::Admin)),
            &json!({"final_state": "FAILED", "note": "x"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    // A refused decision: nothing written either.
    let refused = api
        .post(
            &format!("/v1/tasks/{}/resolve", tasks[1].1 .0),
            Some(token(Role::Viewer)),
            &json!({"final_state": "SENT", "note": "x"}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(events(&world).await.len(), 1, "one act, one row: {:?}", events(&world).await);

    // A test send on a user's behalf.
    let answer = api.post("/v1/users/dee/channels/push/test", Some(token(Role::Resolver)), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    // The user's own test send is no operator's act.
    let own = api.post("/v1/users/dee/channels/push/test", Some(&api.user_token("dee")), &json!({})).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.text);

    // A sign-in, a decision and a sign-out in the console.
    let console = Console::operator(&api, token(Role::Resolver)).await;
    let (notification_b, task_b) = tasks[1].clone();
    let page = console
        .post(&format!("/console/tasks/{}/resolve", task_b.0), &format!("decision=RESEND&note={}", form_value("lost")))
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    let page = console.get(&format!("/console/notifications/{notification_b}")).await;
    assert!(
        page.body.contains("sent again at the request of token day resolver</span>: <span class=\"note\">lost"),
        "the timeline names who decided: {}",
        page.body
    );
    let page = console.post("/console/logout", "").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);

    // A key rotation from the command line's use case.
    let keys = herald_tests::world::test_keyring();
    herald_core::usecases::rotate_keys(
        &herald_core::usecases::Actor::command_line("ops"),
        &*world.store,
        &keys,
        (&*world.store, &world.store.clock()),
        10,
    )
    .await
    .expect("rotate");

    let got = events(&world).await;
    let summary: Vec<(&str, &str, &str)> =
        got.iter().map(|(actor, action, target, _)| (actor.as_str(), action.as_str(), target.as_str())).collect();
    let task_a = format!("task {task}");
    let task_b = format!("task {task_b}");
    assert_eq!(
        summary,
        vec![
            ("lead admin", "mark_sent", task_a.as_str()),
            ("day resolver", "test_send", "user dee on push"),
            ("day resolver", "sign_in", ""),
            ("day resolver", "send_again", task_b.as_str()),
            ("day resolver", "sign_out", ""),
            ("ops", "rotate_keys", ""),
        ]
    );
    assert_eq!(got[0].3, "seen in the provider's log", "the note is the decision's detail");
    assert_eq!(got[4].3, "signed_out");
    assert!(got[5].3.contains("examined"), "{:?}", got[5]);
}

#[tokio::test]
async fn audit_rows_cannot_be_changed_or_removed() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    let _signed_in = Console::operator(&api, token(Role::Admin)).await;
    let pool = world.store.pool();
    let count = || async { world.db.count("SELECT count(*) FROM audit_event").await.expect("count") };
    assert_eq!(count().await, 1, "the sign-in");
    for statement in
        ["UPDATE audit_event SET actor_name = 'someone else'", "DELETE FROM audit_event", "TRUNCATE audit_event"]
    {
        let error = sqlx::query(statement).execute(pool).await.expect_err(statement);
        assert!(error.to_string().contains("append-only"), "{statement}: {error}");
    }
    assert_eq!(count().await, 1);
    let name: String = sqlx::query_scalar("SELECT actor_name FROM audit_event").fetch_one(pool).await.expect("row");
    assert_eq!(name, "lead admin", "unchanged");
    // Control: the same statements work on a table without the trigger (the refusal is the trigger's).
    sqlx::query("CREATE TABLE audit_control AS SELECT * FROM audit_event").execute(pool).await.expect("copy");
    let changed =
        sqlx::query("UPDATE audit_control SET actor_name = 'someone else'").execute(pool).await.expect("update");
    assert_eq!(changed.rows_affected(), 1);
}

#[tokio::test]
async fn the_trail_is_listed_filtered_and_paged_for_admins_only() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    for role in Role::ALL {
        let console = Console::operator(&api, token(role)).await;
        let _ = console.post("/console/logout", "").await;
    }
    let admin = Some(token(Role::Admin));
    let all = api.get("/v1/audit", admin).await.ok(StatusCode::OK);
    assert_eq!(all["events"].as_array().expect("events").len(), 6, "{all}");
    assert_eq!(all["events"][0]["action"], "sign_out", "newest first");
    assert_eq!(all["events"][0]["actor"], "lead admin");

    let by_actor = api.get("/v1/audit?actor=night%20viewer", admin).await.ok(StatusCode::OK);
    let actions: Vec<&str> =
        by_actor["events"].as_array().expect("events").iter().map(|e| e["action"].as_str().unwrap_or("")).collect();
    assert_eq!(actions, ["sign_out", "sign_in"]);
    assert_eq!(by_actor["events"][0]["role"], "viewer");
    let sign_ins = api.get("/v1/audit?action=sign_in", admin).await.ok(StatusCode::OK);
    assert_eq!(sign_ins["events"].as_array().expect("events").len(), 3);
    let future = api.get("/v1/audit?since=2999-01-01T00:00:00Z", admin).await.ok(StatusCode::OK);
    assert_eq!(future["events"].as_array().expect("events").len(), 0);
    let past = api.get("/v1/audit?until=2000-01-01T00:00:00Z", admin).await.ok(StatusCode::OK);
    assert_eq!(past["events"].as_array().expect("events").len(), 0);

    // Pages of two, following next_before to the end.
    let mut seen = Vec::new();
    let mut path = "/v1/audit?limit=2".to_owned();
    loop {
        let page = api.get(&path, admin).await.ok(StatusCode::OK);
        seen.extend(page["events"].as_array().expect("events").iter().map(|e| e["id"].as_i64().expect("id")));
        match page["next_before"].as_i64() {
            Some(before) => path = format!("/v1/audit?limit=2&before={before}"),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!((seen.len(), seen.clone()), (6, sorted), "every event once, newest first");

    for (query, field) in [("action=delete_everything", "action"), ("since=yesterday", "since"), ("limit=0", "limit")] {
        let answer = api.get(&format!("/v1/audit?{query}"), admin).await;
        answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    for role in [Role::Viewer, Role::Resolver] {
        let before = Written::now(&world).await.expect("counts");
        let problem = api.get("/v1/audit", Some(token(role))).await.problem(StatusCode::FORBIDDEN);
        assert_eq!(problem["capability"], "view_audit", "{role}");
        assert_eq!(Written::now(&world).await.expect("counts"), before);
    }

    // The console's page: an admin's, in both languages; a resolver's refusal names the capability.
    let console = Console::operator(&api, token(Role::Admin)).await;
    let page = console.get("/console/audit?actor=night%20viewer&lang=en").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("token night viewer") && page.body.contains("signed out"), "{}", page.body);
    assert!(!page.body.contains("token day resolver"), "filtered by actor");
    let page = console.get("/console/audit?action=sign_in&lang=zh").await;
    assert!(page.body.contains("审计记录") && page.body.contains("登录"), "{}", page.body);
    let resolver = Console::operator(&api, token(Role::Resolver)).await;
    let page = resolver.get("/console/audit?lang=en").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains("view audit trail"), "{}", page.body);
    assert!(!resolver.get("/console/overview").await.body.contains("/console/audit"), "no link for a resolver");
}
