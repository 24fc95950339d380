//! The console's server-side sessions (issue 40): sign-out ends a session on the server, a session ends
//! with the credential that opened it (an admin token removed from the configuration, a user token that
//! expired), after an idle gap, or when its holder ends it from the list of their sessions; a sign-in
//! link signs in once, by a POST, and never carries a token. Real PostgreSQL, the real router on loopback,
//! HTTP as a browser speaks it (cookies, forms, `Sec-Fetch-Site`), redirects not followed.
//!
//! Before server-side sessions, each of these kept working: the cookie was a signed, self-contained
//! value valid for 8 hours whatever happened on the server.

use herald_core::auth::Authenticator;
use herald_domain::{Millis, Timestamp};
use herald_http as api;
use herald_tests::api::{Api, GENEROUS_QUOTA, SERVICE_TOKEN};
use herald_tests::{ClockMode, World};
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret as _, SecretString};

const ADMIN: &str = "sessions-admin-token-0123456789-abcdef";
const OTHER_ADMIN: &str = "sessions-other-admin-token-0123456789";
const USER_SECRET: &str = "the user token secret of the session tests";

fn auth(admins: &[&str]) -> Authenticator {
    let admins: Vec<SecretString> = admins.iter().map(|t| SecretString::from(*t)).collect();
    Authenticator::new(&[SecretString::from(SERVICE_TOKEN)], &admins, SecretString::from(USER_SECRET))
}

async fn start(world: &World, admins: &[&str]) -> Api {
    Api::start_configured(
        world,
        auth(admins),
        api::ConsoleSettings::default(),
        api::limits::Limits::default(),
        (api::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
    )
    .await
    .expect("api")
}

/// A world whose manual clock reads the real time, so that a user token (checked against the system
/// clock at sign-in) and the session (judged by the store's clock) agree on "now".
async fn world_now() -> World {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    world.manual.set(Timestamp(i64::try_from(now.as_millis()).expect("fits")));
    world
}

struct Page {
    status: StatusCode,
    location: String,
    set_cookie: Vec<String>,
    body: String,
}

impl Page {
    /// The `name=value` of the session cookie this answer sets.
    fn session_cookie(&self) -> String {
        let set =
            self.set_cookie.iter().find(|c| c.starts_with("herald_session=") && !c.starts_with("herald_session=;"));
        set.unwrap_or_else(|| panic!("no session cookie set: {:?} {}", self.set_cookie, self.body))
            .split(';')
            .next()
            .expect("name=value")
            .to_owned()
    }

    /// The CSRF token of the page's forms.
    fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").unwrap_or_else(|| panic!("no form: {}", self.body));
        self.body[at + 19..at + 19 + 32].to_owned()
    }
}

async fn request(api: &Api, method: Method, path: &str, cookie: Option<&str>, form: Option<&str>, site: &str) -> Page {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let mut request = client.request(method, format!("{}{path}", api.base)).header("sec-fetch-site", site);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    if let Some(form) = form {
        request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(form.to_owned());
    }
    let response = request.send().await.expect("the console answers");
    let status = response.status();
    let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let set_cookie =
        response.headers().get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned).collect();
    let body = response.text().await.expect("body");
    Page { status, location, set_cookie, body }
}

async fn get(api: &Api, path: &str, cookie: &str) -> Page {
    request(api, Method::GET, path, Some(cookie), None, "same-origin").await
}

async fn post(api: &Api, path: &str, cookie: Option<&str>, form: &str) -> Page {
    request(api, Method::POST, path, cookie, Some(form), "same-origin").await
}

async fn sign_in(api: &Api, token: &str) -> String {
    let page = post(api, "/console/login", None, &format!("token={token}")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    page.session_cookie()
}

#[track_caller]
fn sent_to_sign_in(page: &Page, why: &str) {
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert!(page.location.starts_with("/console/login"), "{}", page.location);
    assert!(page.location.contains(why), "expected {why} in {}", page.location);
}

#[tokio::test]
async fn signing_out_ends_the_session_on_the_server_so_a_copied_cookie_opens_nothing() {
    let world = world_now().await;
    let api = start(&world, &[ADMIN]).await;
    let cookie = sign_in(&api, ADMIN).await;
    assert!(!cookie.contains(ADMIN), "the cookie holds a random id, not the token");
    let page = get(&api, "/console/overview", &cookie).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let copied = cookie.clone();

    let out = post(&api, "/console/logout", Some(&cookie), &format!("csrf={}", page.csrf())).await;
    assert_eq!((out.status, out.location.as_str()), (StatusCode::SEE_OTHER, "/console/login?bye=1"));
    sent_to_sign_in(&get(&api, "/console/overview", &copied).await, "ended=signed_out");
    let ended: Option<String> = sqlx::query_scalar("SELECT max(ended_reason) FROM console_session")
        .fetch_one(world.db.store.pool())
        .await
        .unwrap();
    assert_eq!(ended.as_deref(), Some("signed_out"));
    // The table holds the id's digest, never the id.
    let id = cookie.split_once('=').expect("name=value").1;
    assert_eq!(digest_hex(&world, id).await.len(), 64);
    let by_digest = world
        .db
        .count(&format!("SELECT count(*) FROM console_session WHERE id_digest = sha256(convert_to('{id}', 'UTF8'))"))
        .await
        .expect("count");
    assert_eq!(by_digest, 1);
}

/// The SHA-256 of `text` in hex, as PostgreSQL computes it.
async fn digest_hex(world: &World, text: &str) -> String {
    sqlx::query_scalar("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')")
        .bind(text)
        .fetch_one(world.db.store.pool())
        .await
        .expect("sha256")
}

#[tokio::test]
async fn an_admin_token_removed_from_the_configuration_ends_every_session_it_opened() {
    let world = world_now().await;
    let before = start(&world, &[ADMIN, OTHER_ADMIN]).await;
    let removed = sign_in(&before, ADMIN).await;
    let kept = sign_in(&before, OTHER_ADMIN).await;
    // The same database, a process configured without ADMIN (a restart, or the next process behind the
    // load balancer): its sessions end at their next request, the other admin's do not.
    let after = start(&world, &[OTHER_ADMIN]).await;
    sent_to_sign_in(&get(&after, "/console/overview", &removed).await, "ended=credential_revoked");
    assert_eq!(get(&after, "/console/overview", &kept).await.status, StatusCode::OK);
    // Ended for every process, also one that still lists the token.
    sent_to_sign_in(&get(&before, "/console/overview", &removed).await, "ended=credential_revoked");
    let page = request(&before, Method::GET, "/console/login?ended=credential_revoked", None, None, "none").await;
    assert!(page.body.contains("no longer accepted"), "the sign-in page says why: {}", page.body);
}

#[tokio::test]
async fn a_session_ends_with_the_user_token_that_opened_it_and_after_an_idle_gap() {
    let world = world_now().await;
    let api = start(&world, &[ADMIN]).await;
    let now = u64::try_from(world.manual.read().as_millis() / 1000).expect("positive");
    let short = auth(&[ADMIN]).user_token_until("ada", now + 3);
    let cookie = sign_in(&api, short.expose_secret()).await;
    assert_eq!(get(&api, "/console/me/inbox", &cookie).await.status, StatusCode::OK);
    world.manual.advance(Millis::from_secs(4));
    sent_to_sign_in(&get(&api, "/console/me/inbox", &cookie).await, "ended=credential_expired");

    let long = auth(&[ADMIN]).user_token_for("ada", std::time::Duration::from_secs(86_400));
    let cookie = sign_in(&api, long.expose_secret()).await;
    world.manual.advance(Millis::from_secs(59 * 60));
    assert_eq!(get(&api, "/console/me/inbox", &cookie).await.status, StatusCode::OK, "59 minutes idle is not an hour");
    world.manual.advance(Millis::from_secs(59 * 60));
    assert_eq!(
        get(&api, "/console/me/inbox", &cookie).await.status,
        StatusCode::OK,
        "each request restarts the idle gap"
    );
    world.manual.advance(Millis::from_secs(61 * 60));
    sent_to_sign_in(&get(&api, "/console/me/inbox", &cookie).await, "ended=idle");
}

#[tokio::test]
async fn a_person_sees_their_sessions_and_ends_one_from_another_browser() {
    let world = world_now().await;
    let api = start(&world, &[ADMIN]).await;
    let token = auth(&[ADMIN]).user_token("bea");
    let laptop = sign_in(&api, token.expose_secret()).await;
    let phone = sign_in(&api, token.expose_secret()).await;
    let someone_else = sign_in(&api, auth(&[ADMIN]).user_token("cy").expose_secret()).await;
    let page = get(&api, "/console/me/sessions", &laptop).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(page.body.matches("name=\"session\"").count(), 2, "bea's two sessions, not cy's: {}", page.body);
    assert!(page.body.contains("this browser"));

    // The phone's session, named as the page names it.
    let digests: Vec<String> = page
        .body
        .match_indices("name=\"session\" value=\"")
        .map(|(at, m)| page.body[at + m.len()..at + m.len() + 64].to_owned())
        .collect();
    let phone_digest = digest_hex(&world, phone.split_once('=').expect("name=value").1).await;
    assert!(digests.contains(&phone_digest), "{digests:?}");
    let ended =
        post(&api, "/console/me/sessions/end", Some(&laptop), &format!("csrf={}&session={phone_digest}", page.csrf()))
            .await;
    assert_eq!((ended.status, ended.location.as_str()), (StatusCode::SEE_OTHER, "/console/me/sessions?notice=ended"));
    sent_to_sign_in(&get(&api, "/console/me/inbox", &phone).await, "ended=ended_by_holder");
    assert_eq!(get(&api, "/console/me/inbox", &laptop).await.status, StatusCode::OK);

    // Another person's session cannot be ended from here, even by its digest.
    let cy_digest = digest_hex(&world, someone_else.split_once('=').expect("name=value").1).await;
    let page = get(&api, "/console/me/sessions", &laptop).await;
    let refused =
        post(&api, "/console/me/sessions/end", Some(&laptop), &format!("csrf={}&session={cy_digest}", page.csrf()))
            .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&api, "/console/me/inbox", &someone_else).await.status, StatusCode::OK);

    // An operator ending every session of a user (`herald sessions end --user`) ends them at once.
    let services = world.services();
    let ended =
        herald_core::sessions::end_all(&services, &herald_ports::SessionOwner::User("bea".into())).await.unwrap();
    assert_eq!(ended, 1, "the laptop's");
    sent_to_sign_in(&get(&api, "/console/me/inbox", &laptop).await, "ended=ended_by_operator");
}

#[tokio::test]
async fn a_sign_in_link_signs_in_once_by_a_post_and_never_carries_a_token() {
    let world = world_now().await;
    let api = start(&world, &[ADMIN]).await;
    let link = api.sign_in_link("dan").await;
    assert!(link.starts_with("/console/login/user?code="), "{link}");

    // Opening the link (a mail scanner, a preview) signs nobody in and burns nothing.
    for _ in 0..2 {
        let page = request(&api, Method::GET, &link, None, None, "cross-site").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.set_cookie.iter().all(|c| !c.starts_with("herald_session=")), "{:?}", page.set_cookie);
    }
    let code = link.split_once("code=").expect("a code").1;
    // The button's POST from another site is refused like the sign-in form's (login CSRF).
    let forged =
        request(&api, Method::POST, "/console/login/user", None, Some(&format!("code={code}")), "cross-site").await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(forged.set_cookie.is_empty());
    let page = post(&api, "/console/login/user", None, &format!("code={code}")).await;
    assert_eq!((page.status, page.location.as_str()), (StatusCode::SEE_OTHER, "/console/me/inbox"), "{}", page.body);
    let cookie = page.session_cookie();
    assert_eq!(get(&api, "/console/me/inbox", &cookie).await.status, StatusCode::OK);
    let again = post(&api, "/console/login/user", None, &format!("code={code}")).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED, "a link signs in once");
    assert!(again.set_cookie.is_empty());

    // A link not used in time opens nothing.
    let late = api.sign_in_link("dan").await;
    world.manual.advance(Millis::from_secs(16 * 60));
    let code = late.split_once("code=").expect("a code").1;
    assert_eq!(post(&api, "/console/login/user", None, &format!("code={code}")).await.status, StatusCode::UNAUTHORIZED);

    // The old form, a bearer token in the URL (history, proxy logs), is never accepted.
    let token = auth(&[ADMIN]).user_token("dan");
    let old =
        request(&api, Method::GET, &format!("/console/login/user?token={}", token.expose_secret()), None, None, "none")
            .await;
    assert_eq!(old.status, StatusCode::GONE);
    assert!(old.set_cookie.iter().all(|c| !c.starts_with("herald_session=")));
    assert!(!old.body.contains(token.expose_secret()), "the page does not repeat the token");
    // Only a service or admin token makes links.
    let user_made = api.call(Method::POST, "/v1/users/dan/sign-in-links", Some(token.expose_secret()), None).await;
    let _ = user_made.problem(StatusCode::FORBIDDEN);
    // Codes are stored as digests only.
    let by_digest = world
        .db
        .count(&format!(
            "SELECT count(*) FROM console_sign_in_link WHERE code_digest = sha256(convert_to('{code}', 'UTF8'))"
        ))
        .await
        .expect("count");
    assert_eq!(by_digest, 1);
}

#[tokio::test]
async fn with_https_the_cookie_is_host_bound_and_secure_and_answers_carry_hsts() {
    let world = world_now().await;
    let console = api::ConsoleSettings { https: true, ..api::ConsoleSettings::default() };
    let api = Api::start_configured(
        &world,
        auth(&[ADMIN]),
        console,
        api::limits::Limits::default(),
        (api::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
    )
    .await
    .expect("api");
    let page = post(&api, "/console/login", None, &format!("token={ADMIN}")).await;
    let set = page.set_cookie.first().expect("a cookie");
    assert!(set.starts_with("__Host-herald_session="), "{set}");
    assert!(set.contains("; Path=/;") && set.contains("Secure") && set.contains("HttpOnly"), "{set}");
    let cookie = set.split(';').next().expect("name=value").to_owned();
    let client = reqwest::Client::new();
    let answer = client.get(format!("{}/console/overview", api.base)).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["strict-transport-security"], "max-age=31536000");
    assert_eq!(answer.headers()["x-content-type-options"], "nosniff");
}
