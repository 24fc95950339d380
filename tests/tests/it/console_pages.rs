//! The console's second pass (issue 43, items 5–8), read as a browser without script reads it: honest
//! words for what happened, finding a delivery, reading times and channel names, the overview's chart.
//! The journeys in `tests/tests/browser.rs` see the same pages in Chromium (time zones, axe-core).

use herald_domain::{Millis, TaskId};
use herald_standin::Script;
use herald_tests::api::{Api, ADMIN_TOKEN};
use herald_tests::console::{form_value, Console};
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;

const HOUR: u64 = 3_600_000;

async fn drain(world: &World) {
    world.worker("w", 60_000).drain(10).await.expect("drain");
}

/// A Miaotixing task of `user` whose call got `script`: parked for a human (the channel has neither key
/// nor query).
async fn parked(world: &World, user: &str, key: &str, script: Script) -> (String, TaskId) {
    world.user(user, &["miao"]).await.expect("user");
    let created = world.submit(user, key, HOUR, None).await.expect("submit");
    world.miao.script_for(&World::destination(user, "miao"), script);
    drain(world).await;
    (created.notification_ref.to_string(), created.tasks[0].task_id)
}

/// The part of `page` from the element with id `id` to the end of its section.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("#{id} in {page}"));
    let rest = &page[start..];
    &rest[..rest.find("</section>").unwrap_or(rest.len())]
}

/// The opening tag of the button whose value is `value`.
fn button<'a>(page: &'a str, value: &str) -> &'a str {
    let at = page.find(&format!("value=\"{value}\"")).unwrap_or_else(|| panic!("a {value} button"));
    let start = page[..at].rfind("<button").expect("its tag");
    let end = at + page[at..].find('>').expect("its end");
    &page[start..=end]
}

/// One accepted, one marked sent by an operator after its answer was lost, one parked after an answer
/// nobody could read: what the overview, the review queue and the chart must tell apart.
struct Scene {
    world: World,
    api: Api,
    operator: Console,
    unreadable: TaskId,
    /// The notification the channel accepted.
    accepted: String,
}

async fn scene() -> Scene {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("ana", &["miao"]).await.expect("user");
    let accepted = world.submit("ana", "order-1", HOUR, None).await.expect("submit").notification_ref.to_string();
    drain(&world).await;
    let (_, lost) = parked(&world, "ben", "order-2", Script::DropAfterAccept).await;
    let (_, unreadable) = parked(&world, "cai", "order-3", Script::Garbage).await;
    let operator = Console::operator(&api, ADMIN_TOKEN).await;
    let fields = format!("decision=SENT&note={}", form_value("ben confirmed by phone"));
    let done = operator.post(&format!("/console/tasks/{}/resolve", lost.0), &fields).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    Scene { world, api, operator, unreadable, accepted }
}

#[tokio::test]
async fn the_overview_tells_the_channels_acceptance_from_an_operators_mark() {
    let s = scene().await;
    let page = s.operator.get("/console/overview").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("accepted by channel (SENT): 1"), "one acceptance by the channel: {}", page.body);
    assert!(page.body.contains("marked sent by an operator (SENT): 1"), "one operator's mark: {}", page.body);
    assert!(!page.body.contains("accepted by channel (SENT): 2"), "the mark is not counted as an acceptance");
    let zh = s.operator.get("/console/overview?lang=zh").await.body;
    assert!(zh.contains("等待人工处理的任务："), "a full-width colon: {zh}");
    assert!(!zh.contains("等待人工处理的任务: "), "not an ASCII one");
}

#[tokio::test]
async fn an_unreadable_answer_says_what_happened_and_the_reason_does_not_repeat_itself() {
    let s = scene().await;
    let page = s.operator.get("/console/review").await.body;
    let task = section(&page, &format!("task-{}", s.unreadable.0));
    assert!(task.contains("HTTP 200 with an unrecognised text"), "what happened: {task}");
    assert!(!task.contains("connection broke"), "no broken connection was seen: {task}");
    assert!(!task.contains("outcome unknown: outcome unknown"), "the reason said once: {task}");
    assert!(task.contains("neither idempotency key nor query"), "why it is parked: {task}");

    let zh = s.operator.get("/console/review?lang=zh").await.body;
    let task = section(&zh, &format!("task-{}", s.unreadable.0));
    assert!(task.contains("尝试次数") && !task.contains("次尝试"), "{task}");
    assert!(task.contains("无法识别"), "the detail in Chinese: {task}");
    assert!(!task.contains("unrecognised text") && !task.contains("outcome unknown"), "no English left: {task}");
}

#[tokio::test]
async fn send_again_says_the_task_is_queued_not_sent() {
    let s = scene().await;
    let fields = format!("decision=RESEND&note={}", form_value("cai never got it"));
    let done = s.operator.post(&format!("/console/tasks/{}/resolve", s.unreadable.0), &fields).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let page = s.operator.get(&done.location).await.body;
    let banner = format!("Task {}: queued to be sent again", s.unreadable.0);
    assert!(page.contains(&banner), "{page}");
    assert!(!page.contains("sent again at an operator"), "nothing was sent yet: {page}");
}

#[tokio::test]
async fn the_decisions_do_not_make_mark_sent_the_default() {
    let s = scene().await;
    let page = s.operator.get("/console/review").await.body;
    assert!(!button(&page, "SENT").contains("primary"), "{}", button(&page, "SENT"));
    assert!(button(&page, "RESEND").contains("primary"), "the action that cannot lose a prompt");
    let css = s.operator.get("/console/static/console.css").await.body;
    assert!(!css.contains(".actions button:first-child"), "no decision is primary by its place");
}

#[tokio::test]
async fn the_review_queue_shows_how_long_a_task_has_waited() {
    let s = scene().await;
    s.world.manual.advance(Millis::from_secs(5 * 60));
    let page = s.operator.get("/console/review").await.body;
    assert!(page.contains("5 min ago"), "{page}");
    let zh = s.operator.get("/console/review?lang=zh").await.body;
    assert!(zh.contains("5 分钟前"), "{zh}");
}

#[tokio::test]
async fn the_overview_draws_the_last_hour_and_day_with_the_numbers_behind() {
    let s = scene().await;
    let page = s.operator.get("/console/overview").await.body;
    assert_eq!(page.matches("<svg").count(), 2, "the hour and the day: {page}");
    assert!(page.contains("role=\"img\"") && page.contains("<title") && page.contains("<desc"), "{page}");
    let hour = section(&page, "chart-hour");
    assert!(
        hour.contains("1 accepted by channel, 0 refused or not sent, 2 outcome unknown, 1 decided by an operator; 1 parked, still waiting"),
        "the totals in words: {hour}"
    );
    assert!(hour.contains("<details") && hour.contains("<table"), "the numbers one click away: {hour}");
    let zh = s.operator.get("/console/overview?lang=zh").await.body;
    let hour = section(&zh, "chart-hour");
    assert!(hour.contains("最近一小时"), "{hour}");
    assert!(hour.contains("第三方已接受 1"), "{hour}");
}

#[tokio::test]
async fn the_delivery_log_says_why_an_event_key_alone_finds_nothing_and_lists_a_users_notifications() {
    let s = scene().await;
    let page = s.operator.get("/console/log?event=order-1").await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", page.body);
    assert!(page.body.contains("An event key is unique per user"), "says why, naming the field: {}", page.body);
    let by_user = s.operator.get("/console/log?user=ana").await;
    assert_eq!(by_user.status, StatusCode::SEE_OTHER);
    let inbox = s.operator.get(&by_user.location).await.body;
    let link = format!("href=\"/console/notifications/{}\"", s.accepted);
    assert!(inbox.contains(&link), "a link to each: {inbox}");
}

#[tokio::test]
async fn a_console_path_that_does_not_exist_answers_a_page() {
    let s = scene().await;
    let page = s.operator.get("/console/nowhere/at-all").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(page.body.starts_with("<!DOCTYPE html>") && page.body.contains("Not found."), "{}", page.body);
    let posted = s.operator.post("/console/nowhere", "").await;
    assert_eq!(posted.status, StatusCode::NOT_FOUND, "a form posted to no page: {}", posted.body);
    assert!(posted.body.starts_with("<!DOCTYPE html>"), "{}", posted.body);
    let anonymous = reqwest::get(format!("{}/console/nowhere", s.api.base)).await.expect("answer");
    assert_eq!(anonymous.status(), StatusCode::NOT_FOUND);
    assert!(anonymous.text().await.expect("body").contains("<h1>"), "a page, not the API's problem document");
    let api = reqwest::get(format!("{}/v1/nowhere", s.api.base)).await.expect("answer");
    assert!(api.text().await.expect("body").contains("\"status\""), "the API keeps its problem documents");
}

#[tokio::test]
async fn the_sign_in_page_speaks_to_whoever_signs_in_and_sends_the_signed_in_on() {
    let s = scene().await;
    for lang in ["en", "zh"] {
        let page = reqwest::get(format!("{}/console/login?lang={lang}", s.api.base)).await.expect("page");
        let body = page.text().await.expect("body");
        assert!(!body.contains("Admin token") && !body.contains("管理员令牌"), "{body}");
    }
    let page = s.operator.get("/console/login").await;
    assert_eq!((page.status, page.location.as_str()), (StatusCode::SEE_OTHER, "/console/overview"));
    let user = Console::user(&s.api, "ana").await;
    let page = user.get("/console/login").await;
    assert_eq!((page.status, page.location.as_str()), (StatusCode::SEE_OTHER, "/console/me/inbox"));
}

#[tokio::test]
async fn a_test_send_is_answered_by_a_redirect_and_shown_beside_its_channel() {
    let s = scene().await;
    let user = Console::user(&s.api, "ana").await;
    let before = s.world.miao.sends();
    let answer = user.post("/console/me/channels/miao/test", "").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert!(answer.location.starts_with("/console/me/channels?"), "{}", answer.location);
    assert_eq!(s.world.miao.sends(), before + 1);
    for _ in 0..2 {
        let page = user.get(&answer.location).await.body;
        let card = section(&page, "ch-miao");
        assert!(card.contains("Accepted by miao — did it arrive?"), "{card}");
        assert!(card.contains("I received it"), "{card}");
    }
    assert_eq!(s.world.miao.sends(), before + 1, "reading the answer again sends nothing");
}

#[tokio::test]
async fn channels_are_shown_by_their_display_name() {
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.display_name = Some("WeChat reminder".to_owned());
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("dan", &["miao", "sms"]).await.expect("user");
    world.submit("dan", "order-9", HOUR, None).await.expect("submit");
    drain(&world).await;
    let user = Console::user(&api, "dan").await;
    let inbox = user.get("/console/me/inbox").await.body;
    assert!(inbox.contains("WeChat reminder"), "{inbox}");
    let channels = user.get("/console/me/channels").await.body;
    assert!(section(&channels, "ch-miao").contains("WeChat reminder"), "{channels}");
    assert!(section(&channels, "ch-sms").contains(">sms<"), "no display name: the id");
    let operator = Console::operator(&api, ADMIN_TOKEN).await;
    let overview = operator.get("/console/overview").await.body;
    assert!(overview.contains("WeChat reminder"), "{overview}");
}

#[tokio::test]
async fn the_charts_put_each_attempt_in_its_own_bucket() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("eve", &["miao"]).await.expect("user");
    world.submit("eve", "early", HOUR, None).await.expect("submit");
    drain(&world).await;
    world.manual.advance(Millis::from_secs(2 * 3600));
    world.submit("eve", "late", HOUR, None).await.expect("submit");
    drain(&world).await;
    let operator = Console::operator(&api, ADMIN_TOKEN).await;
    let page = operator.get("/console/overview").await.body;
    let hour = section(&page, "chart-hour");
    assert!(hour.starts_with("id=\"chart-hour\"") && hour.contains("1 accepted by channel,"), "{hour}");
    let day = section(&page, "chart-day");
    assert!(day.contains("2 accepted by channel,"), "{day}");
    assert_eq!(day.matches("<td>1</td>").count(), 2, "two hours with one acceptance each: {day}");
    world.manual.advance(Millis::from_secs(23 * 3600));
    // A day later the session has ended: a new one.
    let operator = Console::operator(&api, ADMIN_TOKEN).await;
    let page = operator.get("/console/overview").await.body;
    assert!(section(&page, "chart-day").contains("1 accepted by channel,"), "the early one left the day");
}
