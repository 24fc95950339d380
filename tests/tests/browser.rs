//! The console's journeys in a real browser (issue 11): Debian's Chromium driven through chromedriver
//! (WebDriver, fantoccini) against Herald's real router — the one `herald serve` builds, console
//! included — over a real PostgreSQL and the stand-in channels.
//!
//! Chromium and chromedriver are installed by `scripts/ensure-chromium.sh` (called by `scripts/test.sh`
//! and `.ci/run`); without the programs these tests fail and say how to install them. For a quick local
//! loop they can be left out with `HERALD_SKIP_BROWSER=1` — reported as skipped by `scripts/test.sh`,
//! never as passed, and never set by `.ci/run` — and run alone with `scripts/test.sh --test browser`. Each journey starts its own chromedriver and a Chromium with a fresh profile, takes screenshots
//! (PNG) into `target/console-screenshots/` (printed), and checks on every page it sees: the planted
//! destinations are in no page's HTML, the page has a title and one `h1`, every input has a label, every
//! action is a focusable control with a name. Journeys run one at a time (a process-wide lock), so two
//! Chromiums never compete for the two cores.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use herald_channels::config::DigestSetting;
use herald_domain::{Millis, TaskId, TaskState};
use herald_standin::{skip, Script};
use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
use herald_tests::world::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// One journey at a time (a tokio mutex: it is held across awaits, and a failed journey releases it).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A journey's turn: the lock, and a watchdog that ends the whole test binary with a message naming the
/// journey if it runs longer than [`JOURNEY_LIMIT`] — a browser or driver that stops answering must fail
/// the run, not hold it until CI's time cap.
struct Turn {
    _lock: tokio::sync::MutexGuard<'static, ()>,
    done: std::sync::mpsc::Sender<()>,
}

/// Set it to leave the journeys out of a local run (never in CI).
const SKIP_BROWSER: &str = "HERALD_SKIP_BROWSER";

const JOURNEY_LIMIT: Duration = Duration::from_secs(240);

impl Drop for Turn {
    fn drop(&mut self) {
        let _ = self.done.send(());
    }
}

async fn serial() -> Turn {
    let lock = ONE_AT_A_TIME.lock().await;
    let journey = std::thread::current().name().unwrap_or("a journey").to_owned();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(JOURNEY_LIMIT) {
            eprintln!("{journey}: still running after {} s; stopping the browser tests", JOURNEY_LIMIT.as_secs());
            std::process::exit(101);
        }
    });
    Turn { _lock: lock, done }
}

const SVC: Option<&str> = Some(SERVICE_TOKEN);
const ADMIN: Option<&str> = Some(ADMIN_TOKEN);
/// A destination typed into the settings page by the test-send journey: it must never come back.
const TYPED_DESTINATION: &str = "PLANTED-c0de-7q";

fn program(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run scripts/ensure-chromium.sh (installs Debian's chromium and chromium-driver)",
        path.display()
    );
    path
}

fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir.canonicalize().unwrap_or(dir)
}

/// A chromedriver, a Chromium session with a fresh profile, and what every page is checked against.
struct Browser {
    client: Client,
    _driver: tokio::process::Child,
    profile: PathBuf,
    base: String,
    /// Strings no page may contain (destinations).
    secrets: Vec<String>,
}

/// axe-core's script (`scripts/ensure-axe.sh`): `HERALD_AXE`, else where that script puts it.
fn axe_source() -> &'static str {
    static AXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AXE.get_or_init(|| {
        let path = std::env::var_os("HERALD_AXE").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/axe-core/axe-4.14.1.min.js"),
            PathBuf::from,
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("axe-core is missing at {} ({e}): run scripts/ensure-axe.sh (npm pack axe-core)", path.display())
        })
    })
}

impl Browser {
    async fn start(base: &str, accept_language: &str, secrets: Vec<String>) -> Browser {
        Browser::start_in(base, accept_language, "UTC", secrets).await
    }

    /// A browser whose clock reads in the time zone `tz` (an IANA name).
    async fn start_in(base: &str, accept_language: &str, tz: &str, secrets: Vec<String>) -> Browser {
        let chromium = program("HERALD_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = program("HERALD_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let driver = tokio::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .env("TZ", tz)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let probe = reqwest::Client::new();
        herald_tests::wait::wait_until("chromedriver answers", || async {
            probe.get(format!("{url}/status")).send().await.is_ok()
        })
        .await;
        let profile = std::env::temp_dir().join(format!("herald-chromium-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", format!("--user-data-dir={}", profile.display()),
                    "--window-size=1200,900", format!("--lang={accept_language}"),
                ],
                "prefs": { "intl.accept_languages": accept_language },
            }
        });
        let serde_json::Value::Object(caps) = caps else { unreachable!() };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Browser { client, _driver: driver, profile, base: base.to_owned(), secrets }
    }

    async fn goto(&self, path: &str) -> String {
        self.client.goto(&format!("{}{path}", self.base)).await.unwrap_or_else(|e| panic!("{path}: {e}"));
        self.page().await
    }

    /// The current page's HTML, after the checks every page must pass.
    async fn page(&self) -> String {
        let html = self.client.source().await.expect("page source");
        for secret in &self.secrets {
            assert!(!html.contains(secret.as_str()), "a destination appeared in the page's HTML");
        }
        let problems = self
            .client
            .execute(
                r"const p = [];
                  if (!document.title.trim()) p.push('no title');
                  if (!document.documentElement.lang) p.push('no lang');
                  if (document.querySelectorAll('h1').length !== 1) p.push('not one h1');
                  for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
                    if ((!el.labels || el.labels.length === 0) && !el.getAttribute('aria-label')) p.push('unlabelled ' + (el.name || el.id));
                  }
                  for (const el of document.querySelectorAll('button, a[href]')) {
                    if (el.tabIndex < 0) p.push('not focusable: ' + el.outerHTML);
                    if (!el.textContent.trim() && !el.getAttribute('aria-label')) p.push('nameless: ' + el.outerHTML);
                  }
                  return p;",
                vec![],
            )
            .await
            .expect("accessibility checks");
        assert_eq!(problems, json!([]), "accessibility problems on {}", self.path().await);
        self.axe().await;
        html
    }

    /// Runs axe-core on the page: no serious or critical violation.
    async fn axe(&self) {
        let found = self.axe_violations().await;
        assert_eq!(found, json!([]), "axe-core: serious or critical violations on {}", self.path().await);
    }

    /// The serious and critical violations axe-core finds on the page, one line each.
    async fn axe_violations(&self) -> Value {
        let loaded = self.client.execute("return typeof window.axe === 'object';", vec![]).await.expect("axe?");
        if loaded != json!(true) {
            self.client.execute(&format!("{}\nreturn null;", axe_source()), vec![]).await.expect("inject axe-core");
        }
        let found = self
            .client
            .execute_async(
                r"const done = arguments[arguments.length - 1];
                  axe.run(document, { resultTypes: ['violations'] })
                    .then(r => done(r.violations
                      .filter(v => v.impact === 'serious' || v.impact === 'critical')
                      .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at ' + v.nodes.map(n => n.target.join(' ')).join(', '))))
                    .catch(e => done(['axe-core failed: ' + e]));",
                vec![],
            )
            .await
            .expect("axe-core runs");
        found
    }

    async fn path(&self) -> String {
        self.client.current_url().await.map(|u| u.path().to_owned()).unwrap_or_default()
    }

    async fn title(&self) -> String {
        self.client.title().await.expect("title")
    }

    async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        field.clear().await.expect("clear");
        field.send_keys(text).await.expect("type");
    }

    /// Clicks and returns the next page (after its checks).
    async fn click(&self, css: &str) -> String {
        let old = self.client.find(Locator::Css("html")).await.expect("html");
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .expect("click");
        self.after_submit(old).await
    }

    /// Waits until the page that was showing (`old`) is replaced, then returns the new one.
    async fn after_submit(&self, old: fantoccini::elements::Element) -> String {
        for _ in 0..200 {
            if old.tag_name().await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = self.client.wait().for_element(Locator::Css("main h1")).await;
        self.page().await
    }

    /// At the provider's login page (oidc-provider's, any password): signs in as `login`.
    async fn at_provider_sign_in_as(&self, field: fantoccini::elements::Element, login: &str) {
        field.send_keys(login).await.expect("type");
        self.client
            .find(Locator::Css("input[name=password]"))
            .await
            .expect("password")
            .send_keys("any")
            .await
            .expect("type");
        self.client.find(Locator::Css("button[type=submit]")).await.expect("submit").click().await.expect("click");
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = screenshot_dir().join(name);
        std::fs::write(&path, png).expect("write screenshot");
        println!("screenshot: {}", path.display());
        path
    }

    async fn sign_in_operator(&self) {
        self.goto("/console/login").await;
        self.fill("#token", ADMIN_TOKEN).await;
        let page = self.click("form.card button[type=submit]").await;
        assert_eq!(self.path().await, "/console/overview", "{page}");
    }

    /// Opens the user's one-time sign-in link and presses its button, as the user would.
    async fn sign_in_user(&self, api: &Api, user: &str) {
        let link = api.sign_in_link(user).await;
        self.goto(&link).await;
        assert_eq!(self.path().await, "/console/login/user", "opening the link signs nobody in");
        let page = self.click("form.card button[type=submit]").await;
        assert_eq!(self.path().await, "/console/me/inbox", "{page}");
    }

    async fn close(self) {
        let _ = self.client.close().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

async fn world_and_api() -> (World, Api) {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    (world, api)
}

async fn drain(world: &World) {
    world.worker("browser-w", 60_000).drain(20).await.expect("worker cycles");
}

async fn submit(api: &Api, user: &str, key: &str) -> Value {
    let body =
        json!({"user_id": user, "event_key": key, "body": format!("Order {key} has shipped"), "ttl_seconds": 3600});
    let answer = api.post("/v1/notifications", SVC, &body).await;
    assert!(answer.status == StatusCode::CREATED, "{}", answer.text);
    answer.json()
}

/// A Miaotixing notification for `user` whose connection breaks after the stand-in accepted: parked.
async fn parked(world: &World, api: &Api, user: &str, key: &str) -> (String, i64) {
    world.user(user, &["miao"]).await.unwrap();
    let created = submit(api, user, key).await;
    world.miao.script_for(&World::destination(user, "miao"), Script::DropAfterAccept);
    drain(world).await;
    (created["notification_id"].as_str().map(str::to_owned).unwrap(), created["tasks"][0]["task_id"].as_i64().unwrap())
}

fn secrets(users: &[&str]) -> Vec<String> {
    let mut out = vec![TYPED_DESTINATION.to_owned()];
    for user in users {
        for channel in ["push", "sms", "miao"] {
            out.push(World::destination(user, channel));
        }
    }
    out
}

async fn task_view(world: &World, notification: &str, task: i64) -> herald_ports::TaskView {
    let notification = world.notification_id(notification).await.expect("the notification");
    world.task(notification, TaskId(task)).await.expect("task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_sign_in_is_required_for_every_console_page() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (_world, api) = world_and_api().await;
    let b = Browser::start(&api.base, "en-US", secrets(&[])).await;
    for path in [
        "/console/overview",
        "/console/review",
        "/console/status-events",
        "/console/log",
        "/console/notifications/1",
        "/console/users/alice/inbox",
        "/console/me/inbox",
        "/console/me/channels",
        "/console",
    ] {
        let page = b.goto(path).await;
        assert_eq!(b.path().await, "/console/login", "{path} without a session goes to sign-in");
        assert!(page.contains("id=\"token\""), "{path}: the sign-in form");
    }
    assert!(b.goto("/console/overview").await.contains("Please sign in"));
    assert_eq!(b.title().await, "Sign in — Herald console");
    b.screenshot("01-sign-in-required.png").await;
    // A wrong token is refused and nothing opens.
    b.fill("#token", "not-a-token").await;
    let page = b.click("form.card button[type=submit]").await;
    assert!(page.contains("not an admin token"), "{page}");
    b.goto("/console/review").await;
    assert_eq!(b.path().await, "/console/login");
    // Signing in, then out: the pages close again.
    b.sign_in_operator().await;
    let page = b.goto("/console/review").await;
    assert!(page.contains("No task is waiting for review."));
    let page = b.click("header form button[type=submit]").await;
    assert!(page.contains("You are signed out."), "{page}");
    b.goto("/console/review").await;
    assert_eq!(b.path().await, "/console/login");
    println!("journey sign-in required: passed");
    b.close().await;
}

/// A person signed in on two browsers sees both sessions and ends the other one from the first: the
/// other browser is signed out at its next click, and says why; in Chinese as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_a_person_ends_a_session_of_another_browser() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (_world, api) = world_and_api().await;
    let laptop = Browser::start(&api.base, "en-US", secrets(&[])).await;
    let phone = Browser::start(&api.base, "zh-CN", secrets(&[])).await;
    laptop.sign_in_user(&api, "hana").await;
    phone.sign_in_user(&api, "hana").await;
    let page = laptop.goto("/console/me/sessions").await;
    assert_eq!(laptop.title().await, "Your sessions — Herald console");
    assert_eq!(page.matches("End session").count(), 3, "two sessions, and the hidden column header: {page}");
    assert!(page.contains("this browser") && page.contains("a sign-in link"), "{page}");
    laptop.screenshot("30-sessions.png").await;
    let zh = phone.goto("/console/me/sessions").await;
    assert!(zh.contains("你的会话") && zh.contains("当前浏览器"), "{zh}");
    phone.screenshot("31-sessions-zh.png").await;

    // The laptop ends the session that is not its own.
    let page = laptop.click("tbody tr:not(.current) button[type=submit]").await;
    assert!(page.contains("The session was ended."), "{page}");
    let page = phone.goto("/console/me/inbox").await;
    assert_eq!(phone.path().await, "/console/login", "the phone is signed out at its next request");
    assert!(page.contains("请重新登录"), "it says so: {page}");
    let page = laptop.goto("/console/me/inbox").await;
    assert_eq!(laptop.path().await, "/console/me/inbox", "{page}");
    println!("journey sessions: passed");
    laptop.close().await;
    phone.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_recipient_a_fails_while_b_succeeds_both_shown_in_english_and_chinese() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    world.user("alice", &["miao"]).await.unwrap();
    world.user("bob", &["miao"]).await.unwrap();
    let body = json!({"event_key": "ord-77", "recipients": ["alice", "bob"], "body": "Order ord-77 has shipped", "ttl_seconds": 3600});
    let answer = api.post("/v1/events", SVC, &body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    world.miao.script_for(&World::destination("alice", "miao"), Script::DropAfterAccept);
    drain(&world).await;

    let b = Browser::start(&api.base, "en-US", secrets(&["alice", "bob"])).await;
    b.sign_in_operator().await;
    let page = b.goto("/console/overview").await;
    assert!(page.contains("id=\"parked-total\">1<"), "one parked task");
    assert!(page.contains("Neither key nor query"), "the contract in words");
    b.screenshot("02-overview.png").await;
    let page = b.goto("/console/review").await;
    assert!(page.contains("miao has no idempotency key and no query: ask the user whether the message arrived."));
    assert!(page.contains("alice") && !page.contains("bob"), "only A is parked");
    b.screenshot("03-review-queue.png").await;
    let page = b.goto("/console/users/alice/inbox").await;
    assert!(page.contains("outcome unknown — waiting for a person"), "A's word");
    let page = b.goto("/console/users/bob/inbox").await;
    assert!(page.contains("accepted by channel"), "B's word");
    assert!(!page.to_lowercase().contains("delivered"));
    b.close().await;

    // The users themselves, in Chinese (Accept-Language), and the switch back to English.
    let zh = Browser::start(&api.base, "zh-CN", secrets(&["alice", "bob"])).await;
    zh.sign_in_user(&api, "bob").await;
    let page = zh.goto("/console/me/inbox").await;
    assert!(page.contains("第三方已接受") && !page.contains("已送达"), "SPEC §1 in Chinese");
    assert!(page.contains("lang=\"zh-Hans\""));
    zh.screenshot("04-inbox-zh.png").await;
    let page = zh.click("a.lang").await;
    assert!(page.contains("accepted by channel"), "the switch");
    let page = zh.goto("/console/me/inbox").await;
    assert!(page.contains("Your inbox"), "the choice is remembered");
    zh.close().await;

    let zh = Browser::start(&api.base, "zh-CN", secrets(&["alice", "bob"])).await;
    zh.sign_in_user(&api, "alice").await;
    let page = zh.goto("/console/me/inbox").await;
    assert!(page.contains("结果未知"), "A's word in Chinese");
    zh.close().await;
    println!("journey recipient A fails, B succeeds: passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_an_operator_resolves_a_parked_task_once_and_a_second_tab_gets_the_conflict() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    let (notification, task) = parked(&world, &api, "carol", "ord-5").await;
    let b = Browser::start(&api.base, "en-US", secrets(&["carol"])).await;
    b.sign_in_operator().await;
    let first = b.client.window().await.expect("tab");
    b.goto("/console/review").await;
    let second = b.client.new_window(true).await.expect("second tab").handle;
    b.client.switch_to_window(second.clone()).await.expect("switch");
    let page = b.goto("/console/review").await;
    assert!(page.contains(&format!("task-{task}")));
    b.fill(&format!("#note-{task}"), "second operator: resend").await;

    // First tab, by keyboard only: the note, Tab to "Mark sent", Enter.
    b.client.switch_to_window(first).await.expect("switch");
    let note = b.client.find(Locator::Css(&format!("#note-{task}"))).await.expect("note");
    note.click().await.expect("focus");
    note.send_keys("user confirmed by phone").await.expect("type");
    let old = b.client.find(Locator::Css("html")).await.expect("html");
    b.client.active_element().await.expect("focus").send_keys("\u{e004}").await.expect("Tab");
    let focused = b.client.active_element().await.expect("focus");
    assert_eq!(focused.attr("value").await.expect("value").as_deref(), Some("SENT"), "Tab reaches Mark sent");
    focused.send_keys("\u{e007}").await.expect("Enter");
    let page = b.after_submit(old).await;
    assert!(page.contains(&format!("Task {task}: marked sent by an operator.")), "{page}");
    b.screenshot("05-resolved.png").await;

    // Second tab: its decision is refused and says why.
    b.client.switch_to_window(second).await.expect("switch");
    let page = b.click(&format!("#task-{task} button[value='RESEND']")).await;
    assert!(
        page.contains(&format!("Task {task} was already settled (it is SENT now); your decision changed nothing.")),
        "{page}"
    );
    b.screenshot("06-conflict.png").await;

    let view = task_view(&world, &notification, task).await;
    assert_eq!(view.state, TaskState::Sent);
    assert_eq!(view.attempts.iter().filter(|a| a.outcome.is_some_and(herald_domain::Outcome::is_manual)).count(), 1);
    let page = b.goto(&format!("/console/notifications/{notification}")).await;
    assert!(page.contains("marked sent by an operator: user confirmed by phone"), "a human decision shown as one");
    assert!(!page.contains("accepted by channel"), "not as the channel's acceptance");
    b.close().await;
    println!("journey resolve once, second tab conflict: passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_send_again_leads_to_a_new_fenced_attempt() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    let (notification, task) = parked(&world, &api, "dave", "ord-6").await;
    let reference = world.reference(TaskId(task)).await.unwrap();
    let b = Browser::start(&api.base, "en-US", secrets(&["dave"])).await;
    b.sign_in_operator().await;
    b.goto("/console/review").await;
    b.fill(&format!("#note-{task}"), "user says nothing arrived").await;
    let page = b.click(&format!("#task-{task} button[value='RESEND']")).await;
    assert!(
        page.contains(&format!("Task {task}: queued to be sent again, as an operator asked.")),
        "the banner says queued, not sent (nothing was sent yet): {page}"
    );
    let view = task_view(&world, &notification, task).await;
    assert_eq!((view.state, view.outcome_uncertain, view.attempt_count), (TaskState::Pending, false, 0));

    drain(&world).await;
    // The delivery log, by task reference, leads to the notification.
    b.goto("/console/log").await;
    b.fill("#q", &reference).await;
    let page = b.click("form.filters button[type=submit]").await;
    assert_eq!(b.path().await, format!("/console/notifications/{notification}"));
    assert!(
        page.contains("MANUAL_RESEND") && page.contains("sent again at an operator&#39;s request")
            || page.contains("sent again at an operator's request")
    );
    assert!(page.contains("<code>SEND</code>") && page.contains("<code>ACCEPTED</code>"), "a new ordinary attempt");
    b.screenshot("07-send-again-timeline.png").await;
    let view = task_view(&world, &notification, task).await;
    assert_eq!(view.state, TaskState::Sent);
    let last = view.attempts.last().expect("attempt");
    assert_eq!(
        (last.action, last.outcome),
        (Some(herald_domain::Action::Send), Some(herald_domain::Outcome::Accepted))
    );
    assert_eq!(world.miao.sends(), 2);
    b.close().await;
    println!("journey send again: passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_csrf_is_refused_and_a_user_cannot_open_another_users_pages() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    let (notification, task) = parked(&world, &api, "erin", "ord-8").await;
    let b = Browser::start(&api.base, "en-US", secrets(&["erin"])).await;
    b.sign_in_operator().await;
    b.goto("/console/review").await;
    b.client
        .execute(
            "document.querySelectorAll('input[name=csrf]').forEach(i => i.value = '0'.repeat(32)); return null;",
            vec![],
        )
        .await
        .expect("tamper");
    b.fill(&format!("#note-{task}"), "forged").await;
    let page = b.click(&format!("#task-{task} button[value='FAILED']")).await;
    assert!(page.contains("did not come from this console; nothing was changed"), "{page}");
    b.screenshot("08-csrf-refused.png").await;
    assert!(task_view(&world, &notification, task).await.is_parked(), "nothing changed");
    b.close().await;

    let u = Browser::start(&api.base, "en-US", secrets(&["erin"])).await;
    u.sign_in_user(&api, "erin").await;
    for path in
        ["/console/users/someone-else/inbox", "/console/review", "/console/overview", "/console/notifications/1"]
    {
        let page = u.goto(path).await;
        assert!(page.contains("This page belongs to someone else."), "{path}: {page}");
    }
    u.screenshot("09-forbidden.png").await;
    u.close().await;
    println!("journey CSRF refused, other user's pages refused: passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_test_send_tells_the_truth_for_every_answer() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    let b = Browser::start(&api.base, "en-US", secrets(&["frank"])).await;
    b.sign_in_user(&api, "frank").await;
    b.goto("/console/me/channels").await;
    b.fill("#dest-miao", TYPED_DESTINATION).await;
    b.client.find(Locator::Css("#en-miao")).await.expect("switch").click().await.expect("tick");
    let page = b.click("#ch-miao form:first-of-type button[type=submit]").await;
    assert!(page.contains("Saved.") && page.contains("destination set") && page.contains("not verified"), "{page}");

    let cases: [(&str, Option<Script>, &str); 6] = [
        ("10-test-refused-text.png", Some(Script::text(200, "参数格式有误")), "Refused by miao"),
        ("11-test-500.png", Some(Script::status(500)), "Refused by miao"),
        ("12-test-timeout.png", Some(Script::Delay(Duration::from_secs(2))), "No answer from miao"),
        ("13-test-dropped.png", Some(Script::DropAfterAccept), "No answer from miao"),
        ("14-test-unknown-body.png", Some(Script::Garbage), "No answer from miao"),
        ("15-test-accepted.png", None, "Accepted by miao — did it arrive?"),
    ];
    for (shot, script, words) in cases {
        if let Some(script) = script {
            world.miao.script(script);
        }
        let page = b.click("#ch-miao form.inline button[type=submit]").await;
        assert!(page.contains(words), "{shot}: {page}");
        if words.starts_with("Refused") || words.starts_with("No answer") {
            assert!(page.contains("not verified") && !page.contains("I received it"), "{shot}: nothing verified");
        }
        b.screenshot(shot).await;
    }
    let page = b.click("#ch-miao form.inline button.primary").await;
    assert!(page.contains("Verified: you confirmed that the test arrived.") && page.contains(">verified<"), "{page}");
    b.screenshot("16-test-confirmed.png").await;
    assert!(world.miao.sends() >= 1);
    b.close().await;
    println!("journey test send truth (success, refusal text, 500, timeout, dropped, unknown body): passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_the_egress_interval_is_shown_and_holds_a_second_test_send() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(10_000);
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("gina", &["miao"]).await.unwrap();
    let b = Browser::start(&api.base, "en-US", secrets(&["gina"])).await;
    b.sign_in_user(&api, "gina").await;
    b.goto("/console/me/channels").await;
    let page = b.click("#ch-miao form.inline button[type=submit]").await;
    assert!(page.contains("Accepted by miao"), "{page}");
    let page = b.click("#ch-miao form.inline button[type=submit]").await;
    assert!(page.contains("Too soon for miao: try again in 1"), "{page}");
    b.screenshot("17-egress-too-soon.png").await;
    assert_eq!(world.miao.requests(), 1, "the second press called nobody");
    b.close().await;

    let o = Browser::start(&api.base, "en-US", secrets(&["gina"])).await;
    o.sign_in_operator().await;
    let page = o.goto("/console/overview").await;
    assert!(page.contains("<td>10 s</td>"), "the interval");
    assert!(page.contains("<time datetime="), "the next free slot");
    assert!(page.contains(" UTC</time>"), "the slot reads to the second in UTC, not as RFC 3339");
    o.screenshot("18-egress-overview.png").await;
    o.close().await;
    println!("journey egress interval: passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_a_digest_keeps_every_inbox_item_and_mark_as_read() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let world = World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.digest = Some(DigestSetting { instant_per_hour: 3, window_secs: None });
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("hana", &["push"]).await.unwrap();
    for (n, at) in [0u64, 10, 20, 30, 40].into_iter().enumerate() {
        world.manual.set(herald_tests::world::T0 + Millis::from_secs(at));
        let body = json!({"user_id": "hana", "event_key": format!("e{n}"), "body": format!("Update {n}"),
                          "ttl_seconds": 7200, "thread_key": "order-1"});
        let answer = api.post("/v1/notifications", SVC, &body).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
        drain(&world).await;
    }
    assert_eq!(world.push.sends(), 3, "three instant prompts, the rest in one digest");
    let b = Browser::start(&api.base, "en-US", secrets(&["hana"])).await;
    b.sign_in_user(&api, "hana").await;
    let page = b.goto("/console/me/inbox").await;
    assert_eq!(page.matches("class=\"item unread\"").count(), 5, "every event keeps its inbox item");
    assert_eq!(page.matches("accepted by channel").count(), 3);
    assert_eq!(page.matches("merged into a digest").count(), 2);
    b.screenshot("19-digest-inbox.png").await;
    assert!(page.contains("/read\""), "a mark-as-read form");
    let page = b.click("li.item.unread form button[type=submit]").await;
    assert_eq!(page.matches("class=\"item unread\"").count(), 4, "one marked read");
    assert!(page.contains(">read<"));
    b.screenshot("20-marked-read.png").await;
    let inbox = api.get("/v1/users/hana/inbox", ADMIN).await.ok(StatusCode::OK);
    assert!(inbox["items"][0]["read_at"].is_string(), "the API sees it too: {inbox}");
    b.close().await;
    println!("journey digest 0/10/20/30/40 s, every inbox item kept, mark as read: passed");
}

/// Starts `herald serve` (the real binary) with `config`, and waits until its `/readyz` answers.
async fn herald_serve(config: &Path, base: &str) -> tokio::process::Child {
    let child = tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env_remove("HERALD_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("herald serve starts");
    let probe = reqwest::Client::new();
    herald_tests::wait::wait_until("herald serve is ready", || async {
        probe.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_two_real_herald_serve_processes_share_a_session_and_a_decision_shows_as_human() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    use herald_ports::prelude::*;
    let _one = serial().await;
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let miao = herald_standin::StandIn::start(herald_standin::Kind::Miaotixing).await;
    let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let keyring = herald_channels::cipher::Keyring::new([("k1".to_owned(), secrecy::SecretString::from(key))], "k1")
        .expect("key");
    let destination = "PLANTED-bin-9x";
    let (user, channel) = (herald_domain::UserId::from("ivy"), herald_domain::ChannelName::from("miao"));
    let stored =
        herald_ports::DestinationCipher::encrypt(&keyring, &user, &channel, &secrecy::SecretString::from(destination))
            .expect("encrypt");
    db.store.put(&user, &channel, true, Some(stored)).await.expect("preference");

    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port())
        .collect();
    let dir = std::env::temp_dir().join(format!("herald-console-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut children = Vec::new();
    for port in &ports {
        let config = dir.join(format!("herald-{port}.toml"));
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = \"{}\"\n[server]\nlisten = \"127.0.0.1:{port}\"\n\
                 [auth]\nservice_tokens = [\"{SERVICE_TOKEN}\"]\nadmin_tokens = [\"{ADMIN_TOKEN}\"]\n\
                 user_token_secret = \"a console test secret, the same in both processes\"\n\
                 [keys]\ncurrent = \"k1\"\nk1 = \"{key}\"\n[worker]\nconcurrency = 1\nlease_ms = 5000\npoll_ms = 200\n\
                 [[channel]]\nname = \"miao\"\nkind = \"miaotixing\"\nurl = \"{}\"\ntimeout_ms = 1000\nmin_interval_ms = 0\n",
                db.url,
                miao.base_url()
            ),
        )
        .expect("config file");
        children.push(herald_serve(&config, &format!("http://127.0.0.1:{port}")).await);
    }
    let (a, b) = (format!("http://127.0.0.1:{}", ports[0]), format!("http://127.0.0.1:{}", ports[1]));

    // A notification through process A's API; a worker of either process calls; the connection breaks
    // after the stand-in accepted: parked.
    miao.script(Script::DropAfterAccept);
    let submitted = reqwest::Client::new()
        .post(format!("{a}/v1/notifications"))
        .bearer_auth(SERVICE_TOKEN)
        .json(&json!({"user_id": "ivy", "event_key": "bin-1", "body": "Order bin-1 has shipped", "ttl_seconds": 3600}))
        .send()
        .await
        .expect("submit");
    assert_eq!(submitted.status(), StatusCode::CREATED);
    let notification =
        submitted.json::<Value>().await.expect("json")["notification_id"].as_str().map(str::to_owned).expect("id");
    herald_tests::wait::wait_until("the task is parked", || async {
        let Ok(id) = herald_tests::world::internal_id(&db.store, &notification).await else { return false };
        let view = db.store.notification(id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(herald_ports::TaskView::is_parked))
    })
    .await;

    // Signed in on process A, the same cookie opens process B's pages (one key from the shared secret).
    let browser = Browser::start(&a, "en-US", vec![destination.to_owned()]).await;
    browser.sign_in_operator().await;
    let page = browser.goto("/console/review").await;
    assert!(page.contains("ivy"), "{page}");
    let other = Browser { base: b.clone(), ..browser };
    let page = other.goto("/console/review").await;
    assert_eq!(other.path().await, "/console/review", "process B accepts process A's session");
    let task = db
        .store
        .notification(herald_tests::world::internal_id(&db.store, &notification).await.expect("id"))
        .await
        .expect("view")
        .expect("exists")
        .tasks[0]
        .task_id
        .0;
    assert!(page.contains(&format!("task-{task}")));
    other.fill(&format!("#note-{task}"), "ivy says it never came").await;
    let page = other.click(&format!("#task-{task} button[value='FAILED']")).await;
    assert!(page.contains(&format!("Task {task}: marked not sent by an operator.")), "{page}");
    let page = other.goto(&format!("/console/notifications/{notification}")).await;
    assert!(page.contains("marked not sent by an operator: ivy says it never came"), "{page}");
    other.screenshot("21-real-binary-decision.png").await;
    other.close().await;

    // The user's own page on process A, signed in with their token: the decision in words, not as an error.
    let token = {
        let auth = herald_core::auth::Authenticator::new(
            &[],
            &[],
            secrecy::SecretString::from("a console test secret, the same in both processes"),
        );
        secrecy::ExposeSecret::expose_secret(&auth.user_token("ivy")).to_owned()
    };
    let user = Browser::start(&a, "en-US", vec![destination.to_owned()]).await;
    user.goto("/console/login").await;
    user.fill("#token", &token).await;
    user.click("form.card button[type=submit]").await;
    let page = user.goto("/console/me/inbox").await;
    assert!(page.contains("marked not sent by an operator: ivy says it never came"), "{page}");
    user.close().await;
    for mut child in children {
        let _ = child.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("journey real herald serve x2, shared session, decision words: passed");
}

/// The console's second pass (issue 43) as an operator and a user see it, in English and in Chinese,
/// in a browser whose clock reads in Shanghai: times in the viewer's zone with UTC on hover, the overview's
/// chart, the review queue's ages and decisions, the delivery log by event key alone and by user, the 404
/// page, the sign-in page, and a test send's result beside its channel. axe-core checks every page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_the_second_pass_pages_in_both_languages_and_the_viewers_time_zone() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.display_name = Some("WeChat reminder".to_owned());
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("kim", &["miao"]).await.unwrap();
    let accepted = submit(&api, "kim", "ord-40").await["notification_id"].as_str().map(str::to_owned).unwrap();
    drain(&world).await;
    let (_, lost) = parked(&world, &api, "lee", "ord-41").await;
    world.user("mo", &["miao"]).await.unwrap();
    submit(&api, "mo", "ord-42").await;
    world.miao.script_for(&World::destination("mo", "miao"), Script::Garbage);
    drain(&world).await;
    world.manual.advance(Millis::from_secs(7 * 60));

    let b = Browser::start_in(&api.base, "en-US", "Asia/Shanghai", secrets(&["kim", "lee", "mo"])).await;
    let page = b.goto("/console/login").await;
    assert!(!page.contains("Admin token") && page.contains("Access token"), "{page}");
    b.screenshot("40-sign-in.png").await;
    b.sign_in_operator().await;
    b.goto("/console/login").await;
    assert_eq!(b.path().await, "/console/overview", "a signed-in visitor of the sign-in page is sent on");

    // The review queue: ages, the decisions, what happened and why, times in Shanghai with UTC on hover.
    let page = b.goto("/console/review").await;
    assert!(page.contains("7 min ago"), "{page}");
    assert!(page.contains("HTTP 200 with an unrecognised text") && !page.contains("connection broke: outcome"));
    let (shown, hover) = {
        let t = b.client.find(Locator::Css("section.task time")).await.expect("a time");
        (t.text().await.expect("text"), t.attr("title").await.expect("title").unwrap_or_default())
    };
    assert!(shown.contains("GMT+8"), "the viewer's zone: {shown}");
    assert!(hover.ends_with(" UTC"), "UTC on hover: {hover}");
    b.screenshot("41-review-ages-and-decisions.png").await;
    b.fill(&format!("#note-{lost}"), "lee asked for it again").await;
    let page = b.click(&format!("#task-{lost} button[value='RESEND']")).await;
    assert!(page.contains("queued to be sent again"), "{page}");
    drain(&world).await;

    // The overview: the chart, its numbers one click away, the operator's decisions apart.
    let page = b.goto("/console/overview").await;
    assert_eq!(page.matches("<svg").count(), 2, "{page}");
    assert!(page.contains("WeChat reminder"), "the display name");
    b.client.find(Locator::Css("#chart-hour details summary")).await.expect("summary").click().await.expect("open");
    b.screenshot("42-overview-chart.png").await;

    // The delivery log: an event key alone says why; a user id lists the user's notifications, with links.
    b.goto("/console/log").await;
    b.fill("#event", "ord-40").await;
    let page = b.click("form.filters button[type=submit]").await;
    assert!(page.contains("An event key is unique per user"), "{page}");
    b.screenshot("43-log-event-key-alone.png").await;
    b.fill("#event", "").await;
    b.fill("#user", "kim").await;
    let page = b.click("form.filters button[type=submit]").await;
    assert!(page.contains(&format!("href=\"/console/notifications/{accepted}\"")), "{page}");
    b.screenshot("44-user-notifications.png").await;
    b.click(&format!("a[href='/console/notifications/{accepted}']")).await;
    assert_eq!(b.path().await, format!("/console/notifications/{accepted}"));

    let page = b.goto("/console/nowhere").await;
    assert!(page.contains("There is no console page at this address."), "{page}");
    b.screenshot("45-not-found.png").await;
    // Negative control: an image without a text alternative, planted in the page, is what axe-core reports.
    b.client
        .execute("document.querySelector('main').insertAdjacentHTML('beforeend', '<img src=\"/console/static/x.png\">'); return null;", vec![])
        .await
        .expect("plant");
    let found = b.axe_violations().await.to_string();
    assert!(found.contains("image-alt"), "axe-core sees the planted image: {found}");

    // The same in Chinese.
    b.goto("/console/overview?lang=zh").await;
    b.client.find(Locator::Css("#chart-day details summary")).await.expect("summary").click().await.expect("open");
    b.screenshot("46-overview-chart-zh.png").await;
    let page = b.goto("/console/review").await;
    assert!(page.contains("尝试次数") && page.contains("分钟前"), "{page}");
    assert!(page.contains("应答文字无法识别"), "the detail in Chinese: {page}");
    b.screenshot("47-review-zh.png").await;
    b.goto("/console/nowhere").await;
    b.screenshot("48-not-found-zh.png").await;
    b.close().await;

    println!("journey second pass (times in the viewer's zone, chart, log, 404): passed");
}

/// A user's test send in Chinese: its result beside the channel, named by its display name, after a
/// redirect — reloading the page sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_a_test_sends_result_is_shown_beside_its_channel_and_a_reload_sends_nothing() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.display_name = Some("WeChat reminder".to_owned());
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("kim", &["miao"]).await.unwrap();
    submit(&api, "kim", "ord-40").await;
    drain(&world).await;
    // A user's test send: the result beside the channel, by its display name; reloading sends nothing.
    let u = Browser::start_in(&api.base, "zh-CN", "Asia/Shanghai", secrets(&["kim"])).await;
    u.sign_in_user(&api, "kim").await;
    let page = u.goto("/console/me/inbox").await;
    assert!(page.contains("WeChat reminder"), "{page}");
    u.goto("/console/me/channels").await;
    let sends = world.miao.sends();
    let page = u.click("#ch-miao form.inline button[type=submit]").await;
    assert!(page.contains("第三方已接受（WeChat reminder）"), "{page}");
    assert_eq!(u.path().await, "/console/me/channels", "a redirect after the POST");
    u.screenshot("49-test-result-beside-channel-zh.png").await;
    u.client.refresh().await.expect("reload");
    u.page().await;
    assert_eq!(world.miao.sends(), sends + 1, "reloading the result sends nothing");
    u.close().await;
    println!("journey test result beside its channel, reload sends nothing: passed");
}

/// An operator's decision carries their name on the timeline, and the audit page lists it with the
/// sign-in, filtered, in both languages (issue 43).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_the_audit_trail_names_who_decided() {
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let (world, api) = world_and_api().await;
    let (notification, task) = parked(&world, &api, "audit-u1", "ord-audit").await;
    let b = Browser::start(&api.base, "en-US", secrets(&["audit-u1"])).await;
    b.goto("/console/audit").await;
    assert_eq!(b.path().await, "/console/login", "the audit page needs a session");
    b.sign_in_operator().await;
    b.goto("/console/review").await;
    b.fill(&format!("#note-{task}"), "confirmed with the provider").await;
    b.click(&format!("form[action='/console/tasks/{task}/resolve'] button[value=SENT]")).await;
    let page = b.goto(&format!("/console/notifications/{notification}")).await;
    assert!(
        page.contains("marked sent by token admin</span>: <span class=\"note\">confirmed with the provider"),
        "{page}"
    );
    let page = b.goto("/console/audit?lang=en").await;
    assert!(page.contains("Audit trail") && page.contains("marked sent") && page.contains("signed in"), "{page}");
    assert!(page.contains("confirmed with the provider"), "the note is the decision's detail");
    b.screenshot("50-audit-trail.png").await;
    let page = b.goto("/console/audit?action=sign_in&lang=zh").await;
    assert!(
        page.contains("审计记录") && page.contains("登录") && !page.contains("confirmed with the provider"),
        "{page}"
    );
    b.screenshot("51-audit-trail-zh.png").await;
    b.close().await;

    // As on every other page: times in the viewer's zone with UTC on hover; and in Chinese each of the
    // filter's labels stays on one line.
    let b = Browser::start_in(&api.base, "zh-CN", "Asia/Shanghai", secrets(&["audit-u1"])).await;
    b.sign_in_operator().await;
    b.goto("/console/audit?lang=zh").await;
    let (shown, hover) = {
        let t = b.client.find(Locator::Css("table.audit time")).await.expect("a time");
        (t.text().await.expect("text"), t.attr("title").await.expect("title").unwrap_or_default())
    };
    assert!(shown.contains("GMT+8"), "the viewer's zone: {shown}");
    assert!(hover.ends_with(" UTC"), "UTC on hover: {hover}");
    for field in ["a-actor", "a-action", "a-since", "a-until"] {
        // The label's text in one line box, and its field beside it (the field's middle within the
        // label's height), not on the next line.
        let layout = b
            .client
            .execute(
                "const label = document.querySelector('label[for=' + arguments[0] + ']'); \
                 const r = document.createRange(); r.selectNodeContents(label); \
                 const l = label.getBoundingClientRect(); \
                 const f = document.getElementById(arguments[0]).getBoundingClientRect(); \
                 const middle = (f.top + f.bottom) / 2; \
                 return [r.getClientRects().length, middle >= l.top && middle <= l.bottom];",
                vec![json!(field)],
            )
            .await
            .expect("the label's layout");
        assert_eq!(layout, json!([1, true]), "the label of {field} on one line, beside its field");
    }
    b.screenshot("52-audit-trail-zh-viewers-zone.png").await;
    println!("journey audit trail: passed");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journey_an_operator_signs_in_at_the_identity_provider_with_the_role_it_gives() {
    use herald_tests::peers::oidc::User;
    if skip::chosen(SKIP_BROWSER, "the browser journeys") {
        return;
    }
    let _one = serial().await;
    let world = World::new(ClockMode::Manual).await.expect("world");
    let users =
        [("li", User::new("Li Wei", &["staff", "herald-resolvers"])), ("zhao", User::new("Zhao Min", &["staff"]))];
    let (api, _provider) = Api::start_with_oidc(&world, &users).await.expect("Herald with oidc-provider");
    let (notification, task) = parked(&world, &api, "oidc-u1", "ord-oidc").await;
    let b = Browser::start(&api.base, "en-US", secrets(&["oidc-u1"])).await;

    let page = b.goto("/console/login").await;
    assert!(page.contains("Sign in with Test IdP"), "{page}");
    b.screenshot("60-sign-in-with-identity-provider.png").await;
    // The provider's own login page (oidc-provider's): not Herald's, so not held to the console's checks.
    b.client.find(Locator::Css("#oidc-sign-in")).await.expect("the button").click().await.expect("click");
    let login = b.client.wait().for_element(Locator::Css("input[name=login]")).await.expect("the provider's form");
    let at = b.client.current_url().await.expect("url");
    assert_ne!(at.port(), reqwest::Url::parse(&api.base).expect("base").port(), "at the provider: {at}");
    b.screenshot("61-identity-provider-login.png").await;
    b.at_provider_sign_in_as(login, "li").await;
    herald_tests::wait::wait_until("back in the console", || async { b.path().await == "/console/overview" }).await;
    let page = b.page().await;
    assert!(page.contains(r#"<strong id="operator-name">Li Wei</strong> · role: resolver"#), "{page}");
    b.screenshot("62-signed-in-from-the-identity-provider.png").await;

    // A resolver decides a parked task…
    b.goto("/console/review").await;
    b.fill(&format!("#note-{task}"), "confirmed with the provider").await;
    b.click(&format!("form[action='/console/tasks/{task}/resolve'] button[value=SENT]")).await;
    let page = b.goto(&format!("/console/notifications/{notification}")).await;
    assert!(page.contains("marked sent by Li Wei"), "{page}");
    // …and is refused what the role lacks, named.
    let page = b.goto("/console/audit").await;
    assert!(page.contains("view audit trail") && page.contains("role resolver"), "{page}");
    b.screenshot("63-identity-provider-operator-refused.png").await;
    let page = b.click("form[action='/console/logout'] button").await;
    assert_eq!(b.path().await, "/console/login", "{page}");

    let audit = api.get("/v1/audit?actor=Li%20Wei", Some(ADMIN_TOKEN)).await.ok(StatusCode::OK);
    let actions: Vec<&str> =
        audit["events"].as_array().expect("events").iter().map(|e| e["action"].as_str().unwrap_or("")).collect();
    assert_eq!(actions, ["sign_out", "mark_sent", "sign_in"], "{audit}");
    b.close().await;

    // The same in Chinese, chosen with the console's language switch on the sign-in page (a new browser:
    // the provider remembers who signed in at it).
    let zh = Browser::start(&api.base, "en-US", secrets(&["oidc-u1"])).await;
    zh.goto("/console/login").await;
    let page = zh.click("a.lang").await;
    assert!(page.contains("通过Test IdP登录") && page.contains("或使用令牌登录："), "{page}");
    zh.screenshot("64-sign-in-with-identity-provider-zh.png").await;
    zh.client.find(Locator::Css("#oidc-sign-in")).await.expect("the button").click().await.expect("click");
    let login = zh.client.wait().for_element(Locator::Css("input[name=login]")).await.expect("the provider's form");
    zh.at_provider_sign_in_as(login, "li").await;
    herald_tests::wait::wait_until("back in the console", || async { zh.path().await == "/console/overview" }).await;
    let page = zh.page().await;
    assert!(page.contains(r#"已登录：<strong id="operator-name">Li Wei</strong> · 角色：处理者"#), "{page}");
    zh.screenshot("65-signed-in-from-the-identity-provider-zh.png").await;
    let page = zh.goto("/console/audit").await;
    assert!(page.contains("查看审计记录") && page.contains("角色“处理者”"), "{page}");
    zh.screenshot("66-identity-provider-operator-refused-zh.png").await;
    zh.close().await;

    // Signed in at the provider without a role Herald maps: refused, named, in Chinese; nothing opened.
    let none = Browser::start(&api.base, "zh-CN", secrets(&["oidc-u1"])).await;
    none.goto("/console/login").await;
    none.client.find(Locator::Css("#oidc-sign-in")).await.expect("the button").click().await.expect("click");
    let login = none.client.wait().for_element(Locator::Css("input[name=login]")).await.expect("the provider's form");
    none.at_provider_sign_in_as(login, "zhao").await;
    herald_tests::wait::wait_until("back at Herald", || async { none.path().await == "/console/oidc/callback" }).await;
    let page = none.page().await;
    assert!(page.contains("未登录") && page.contains("您已在身份提供方登录为 Zhao Min"), "{page}");
    none.screenshot("67-identity-provider-no-role-zh.png").await;
    none.goto("/console/overview").await;
    assert_eq!(none.path().await, "/console/login", "no session was opened");
    none.close().await;
    println!("journey identity-provider sign-in (English and Chinese): passed");
}
