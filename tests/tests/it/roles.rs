//! Operators' roles as capabilities (issue 43): every capability that has a door, tried by every role,
//! through the API and the console. The use case decides (`herald_core::usecases`), so both doors refuse
//! the same: a 403 that names the missing capability (a problem's `capability`, the page's words), and
//! nothing written. A role that has the capability gets through.

use herald_core::auth::{Authenticator, OperatorToken};
use herald_domain::operators::{Capability, Role};
use herald_domain::TaskId;
use herald_http as api;
use herald_standin::Script;
use herald_tests::api::{Api, Written, GENEROUS_QUOTA, SERVICE_TOKEN};
use herald_tests::console::{form_value, Console};
use herald_tests::{ClockMode, World};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde_json::json;

const HOUR: u64 = 3_600_000;
const USER_SECRET: &str = "the user token secret of the role tests";

/// The token of each role.
pub fn token(role: Role) -> &'static str {
    match role {
        Role::Viewer => "roles-viewer-token-0123456789-abcdef",
        Role::Resolver => "roles-resolver-token-0123456789-abcd",
        Role::Admin => "roles-admin-token-0123456789-abcdefgh",
    }
}

/// Named tokens of every role: "night viewer", "day resolver", "lead admin".
pub fn auth() -> Authenticator {
    let named = |name: &str, role| OperatorToken { name: name.into(), role, token: SecretString::from(token(role)) };
    Authenticator::new(&[SecretString::from(SERVICE_TOKEN)], &[], SecretString::from(USER_SECRET)).with_operator_tokens(
        &[named("night viewer", Role::Viewer), named("day resolver", Role::Resolver), named("lead admin", Role::Admin)],
    )
}

pub async fn start(world: &World) -> Api {
    Api::start_configured(
        world,
        auth(),
        api::ConsoleSettings::default(),
        api::limits::Limits::default(),
        (api::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
    )
    .await
    .expect("api")
}

/// One Miaotixing task per user, each accepted with its answer lost: parked for a human.
pub async fn parked(world: &World, users: &[String]) -> Vec<(String, TaskId)> {
    let mut out = Vec::new();
    for user in users {
        world.user(user, &["miao"]).await.expect("user");
        let created = world.submit(user, "order-1", HOUR, None).await.expect("submit");
        world.miao.script_for(&World::destination(user, "miao"), Script::DropAfterAccept);
        out.push((created.notification_ref.to_string(), created.tasks[0].task_id));
    }
    world.worker("w", 60_000).drain(20).await.expect("drain");
    out
}

fn allowed(status: StatusCode) -> bool {
    status.is_success() || status.is_redirection()
}

#[tokio::test]
async fn every_capability_by_every_role_through_the_api() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    let users: Vec<String> =
        Role::ALL.iter().flat_map(|r| [format!("{r}-sent"), format!("{r}-again")]).collect::<Vec<_>>();
    let tasks = parked(&world, &users).await;
    for role in Role::ALL {
        world.user(&format!("{role}-push"), &["push"]).await.expect("user");
        world.user(&format!("{role}-erase"), &["push"]).await.expect("user");
    }
    for role in Role::ALL {
        let bearer = Some(token(role));
        let task = |suffix: &str| {
            let i = users.iter().position(|u| *u == format!("{role}-{suffix}")).expect("user");
            tasks[i].clone()
        };
        let (notification, sent_task) = task("sent");
        let (_, again_task) = task("again");
        let push_user = format!("{role}-push");
        let cases: Vec<(Capability, Method, String, Option<serde_json::Value>)> = vec![
            (Capability::ViewOperations, Method::GET, "/v1/review".into(), None),
            (Capability::ViewOperations, Method::GET, format!("/v1/notifications/{notification}"), None),
            (Capability::ViewOperations, Method::GET, format!("/v1/users/{push_user}/inbox"), None),
            (
                Capability::ResolveTasks,
                Method::POST,
                format!("/v1/tasks/{}/resolve", sent_task.0),
                Some(json!({"final_state": "SENT", "note": "seen in the provider's log"})),
            ),
            (
                Capability::SendAgain,
                Method::POST,
                format!("/v1/tasks/{}/resolve", again_task.0),
                Some(json!({"final_state": "RESEND", "note": "the provider lost it"})),
            ),
            (Capability::TestSendForUser, Method::POST, format!("/v1/users/{push_user}/channels/push/test"), None),
            (
                Capability::ActForUsers,
                Method::PUT,
                format!("/v1/users/{push_user}/channels/push"),
                Some(json!({"enabled": false})),
            ),
            (Capability::ActForUsers, Method::POST, format!("/v1/users/{push_user}/sign-in-links"), None),
            (Capability::ViewAudit, Method::GET, "/v1/audit".into(), None),
            (Capability::EraseUsers, Method::POST, format!("/v1/users/{role}-erase/erasure"), Some(json!({}))),
        ];
        for (capability, method, path, body) in cases {
            let before = Written::now(&world).await.expect("counts");
            let sends = world.push.sends_to(&World::destination(&push_user, "push"));
            let answer = api.call(method.clone(), &path, bearer, body.as_ref()).await;
            if role.may(capability) {
                assert!(allowed(answer.status), "{role} {method} {path}: {} {}", answer.status, answer.text);
            } else {
                let problem = answer.problem(StatusCode::FORBIDDEN);
                assert_eq!(problem["capability"], capability.as_str(), "{role} {method} {path}: {problem}");
                assert!(
                    problem["detail"].as_str().unwrap_or_default().contains(capability.as_str()),
                    "the detail names the capability: {problem}"
                );
                assert_eq!(Written::now(&world).await.expect("counts"), before, "{role} {path}: nothing written");
                assert_eq!(
                    world.push.sends_to(&World::destination(&push_user, "push")),
                    sends,
                    "{role} {path}: nothing sent"
                );
            }
        }
    }
}

#[tokio::test]
async fn every_capability_by_every_role_through_the_console() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    let users: Vec<String> =
        Role::ALL.iter().flat_map(|r| [format!("{r}-sent"), format!("{r}-again")]).collect::<Vec<_>>();
    let tasks = parked(&world, &users).await;
    for role in Role::ALL {
        let console = Console::operator(&api, token(role)).await;
        let task = |suffix: &str| {
            let i = users.iter().position(|u| *u == format!("{role}-{suffix}")).expect("user");
            tasks[i].clone()
        };
        let (notification, sent_task) = task("sent");
        let (_, again_task) = task("again");
        let reads = [
            "/console/overview".to_owned(),
            "/console/review".to_owned(),
            "/console/log".to_owned(),
            format!("/console/notifications/{notification}"),
            format!("/console/users/{role}-sent/inbox"),
        ];
        let queue = console.get("/console/review").await;
        assert_eq!(
            queue.body.contains("value=\"SENT\""),
            role.may(Capability::ResolveTasks),
            "{role}: the queue offers the decisions the role allows"
        );
        assert_eq!(queue.body.contains("value=\"RESEND\""), role.may(Capability::SendAgain), "{role}");
        for path in reads {
            let page = console.get(&path).await;
            assert_eq!(role.may(Capability::ViewOperations), allowed(page.status), "{role} {path}: {}", page.status);
        }
        let audit = console.get("/console/audit").await;
        assert_eq!(role.may(Capability::ViewAudit), allowed(audit.status), "{role} /console/audit: {}", audit.status);
        let decisions = [
            (Capability::ResolveTasks, sent_task, "SENT", "resolve tasks"),
            (Capability::SendAgain, again_task, "RESEND", "send again"),
        ];
        for (capability, task, decision, words) in decisions {
            let before = Written::now(&world).await.expect("counts");
            let fields = format!("decision={decision}&note={}", form_value("checked by phone"));
            let page = console.post(&format!("/console/tasks/{}/resolve", task.0), &fields).await;
            if role.may(capability) {
                assert_eq!(page.status, StatusCode::SEE_OTHER, "{role} {decision}: {}", page.body);
            } else {
                assert_eq!(page.status, StatusCode::FORBIDDEN, "{role} {decision}");
                assert!(page.body.contains(words), "{role} {decision}: the page names the capability: {}", page.body);
                assert_eq!(Written::now(&world).await.expect("counts"), before, "{role} {decision}: nothing written");
            }
        }
        let erase_user = format!("{role}-erase");
        world.user(&erase_user, &["push"]).await.expect("user");
        let before = Written::now(&world).await.expect("counts");
        let page =
            console.post(&format!("/console/users/{erase_user}/erasure"), &format!("confirm={erase_user}")).await;
        if role.may(Capability::EraseUsers) {
            assert_eq!(page.status, StatusCode::OK, "{role} erase: {}", page.body);
            assert_eq!(Written::now(&world).await.expect("counts").user_erasure, before.user_erasure + 1);
        } else {
            assert_eq!(page.status, StatusCode::FORBIDDEN, "{role} erase");
            assert!(page.body.contains("erase users"), "{role} erase: the page names the capability: {}", page.body);
            assert_eq!(Written::now(&world).await.expect("counts"), before, "{role} erase: nothing written");
        }
    }
}

#[tokio::test]
async fn the_console_names_the_operator_and_their_role_in_both_languages() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = start(&world).await;
    let console = Console::operator(&api, token(Role::Resolver)).await;
    let page = console.get("/console/overview?lang=en").await;
    // The name and the role, once each (it read "Signed in as operator token day resolver (resolver)").
    let shown = r#"Signed in as <strong id="operator-name">day resolver</strong> · role: resolver"#;
    assert!(page.body.contains(shown), "{}", page.body);
    let page = console.get("/console/overview?lang=zh").await;
    assert!(
        page.body.contains(r#"已登录：<strong id="operator-name">day resolver</strong> · 角色：处理者"#),
        "{}",
        page.body
    );
}
