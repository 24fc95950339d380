//! Console sign-in at a real OpenID provider (issue 43, items 1 and 4): `oidc-provider` from npm, run by
//! the test (`herald_tests::peers::oidc`), Herald's real router over a real PostgreSQL. The sign-in is
//! walked as a browser without script would (the Chromium journey is `browser.rs`,
//! `journey_an_operator_signs_in_at_the_identity_provider…`).

use herald_tests::api::Api;
use herald_tests::peers::oidc::{OidcPeer, User, Walker};
use herald_tests::world::{ClockMode, World};
use reqwest::header::COOKIE;
use reqwest::StatusCode;

async fn start(users: &[(&str, User)]) -> (World, Api, OidcPeer) {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let (api, peer) = Api::start_with_oidc(&world, users).await.expect("Herald with the provider");
    (world, api, peer)
}

async fn count(world: &World, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(world.db.store.pool()).await.expect("count")
}

/// What a request with `cookie` answers: status, `Location`, body.
async fn get(api: &Api, path: &str, cookie: &str) -> (StatusCode, String, String) {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let answer = client.get(format!("{}{path}", api.base)).header(COOKIE, cookie).send().await.expect("answer");
    let status = answer.status();
    let location = answer.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    (status, location, answer.text().await.expect("body"))
}

/// The `herald_session=…` pair of a cookie header.
fn session_cookie(cookies: &str) -> String {
    cookies.split("; ").find(|c| c.starts_with("herald_session=")).expect("a session cookie").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_at_the_provider_with_the_mapped_role_and_the_audit_names_them() {
    let (world, api, peer) = start(&[("li", User::new("Li Wei", &["staff", "herald-resolvers"]))]).await;
    let page = get(&api, "/console/login", "").await;
    assert!(page.2.contains("Sign in with Test IdP") && page.2.contains("/console/oidc/start"), "{}", page.2);

    let walk = peer.sign_in(&api.base, "li").await.expect("sign-in");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
    assert!(walk.body.contains("url=/console/overview") && walk.body.contains("Li Wei"), "{}", walk.body);
    assert!(!walk.herald_cookies.contains("herald_oidc="), "the pending secrets are spent: {}", walk.herald_cookies);
    let cookie = session_cookie(&walk.herald_cookies);
    let (status, _, overview) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview.contains(r#"<strong id="operator-name">Li Wei</strong> · role: resolver"#), "{overview}");
    // Resolvers read the queue and may decide, not read the audit trail.
    let (status, _, refused) = get(&api, "/console/audit", &cookie).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(refused.contains("view audit trail") && refused.contains("resolver"), "{refused}");

    let audit = api.get("/v1/audit?action=sign_in", Some(herald_tests::api::ADMIN_TOKEN)).await.ok(StatusCode::OK);
    assert_eq!(audit["events"][0]["actor"], "Li Wei", "{audit}");
    assert_eq!(audit["events"][0]["role"], "resolver", "{audit}");
    assert_eq!(
        count(
            &world,
            "SELECT count(*) FROM console_session WHERE credential_kind = 'oidc' AND operator_subject = 'li'"
        )
        .await,
        1
    );
    let stored: String = sqlx::query_scalar("SELECT provider_grant FROM console_session WHERE operator_subject = 'li'")
        .fetch_one(world.db.store.pool())
        .await
        .expect("grant");
    assert!(!overview.contains(&stored) && !walk.body.contains(&stored), "the access token is never shown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_state_is_refused_and_writes_nothing() {
    let (world, api, peer) = start(&[("li", User::new("Li Wei", &["herald-admins"]))]).await;
    let nothing_written = "SELECT (SELECT count(*) FROM console_session) + (SELECT count(*) FROM audit_event)";

    // The provider's answer with another state: refused before the code is used.
    let (mut browser, callback) = peer.until_callback(&api.base, "li").await.expect("to the callback");
    let (before, after) = callback.split_once("state=").expect("a state");
    let forged = format!("{before}state=forged{}", after.find('&').map_or("", |i| &after[i..]));
    let walk = browser.finish(&api.base, &forged).await.expect("answer");
    assert_eq!(walk.status, StatusCode::BAD_REQUEST, "{}", walk.body);
    assert!(walk.body.contains("does not belong to a sign-in this browser started"), "{}", walk.body);
    assert!(!walk.herald_cookies.contains("herald_session="), "{}", walk.herald_cookies);
    assert_eq!(count(&world, nothing_written).await, 0, "a refused sign-in writes nothing");
    // The pending secrets were spent by that answer: the right state now finds none either.
    let walk = browser.finish(&api.base, &callback).await.expect("answer");
    assert_eq!(walk.status, StatusCode::BAD_REQUEST, "{}", walk.body);

    // The right answer brought by another browser (no pending cookie): refused.
    let (_, callback) = peer.until_callback(&api.base, "li").await.expect("to the callback");
    let walk = Walker::new().finish(&api.base, &callback).await.expect("answer");
    assert_eq!(walk.status, StatusCode::BAD_REQUEST, "{}", walk.body);
    assert_eq!(count(&world, nothing_written).await, 0);

    // The provider refusing (the person cancelled): said, nothing written.
    let (mut browser, callback) = peer.until_callback(&api.base, "li").await.expect("to the callback");
    let state = callback.split("state=").nth(1).and_then(|s| s.split('&').next()).expect("state").to_owned();
    let refusal = format!("{}/console/oidc/callback?error=access_denied&state={state}", api.base);
    let walk = browser.finish(&api.base, &refusal).await.expect("answer");
    assert_eq!(walk.status, StatusCode::UNAUTHORIZED, "{}", walk.body);
    assert!(walk.body.contains("did not sign you in (access_denied)"), "{}", walk.body);
    assert_eq!(count(&world, nothing_written).await, 0);

    // Control: the same walk with its own state and cookie signs in, and writes the session and its sign-in.
    let (mut browser, callback) = peer.until_callback(&api.base, "li").await.expect("to the callback");
    let walk = browser.finish(&api.base, &callback).await.expect("answer");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
    assert_eq!(count(&world, nothing_written).await, 2, "one session, one audit row");
    // A code is good once: the same answer again (its pending cookie spent) opens nothing more.
    let again = browser.finish(&api.base, &callback).await.expect("answer");
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert_eq!(count(&world, nothing_written).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_without_a_mapped_role_is_refused_with_a_clear_page() {
    let (world, api, peer) = start(&[("sam", User::new("Sam Lee", &["marketing"]))]).await;
    let walk = peer.sign_in(&api.base, "sam").await.expect("walk");
    assert_eq!(walk.status, StatusCode::FORBIDDEN, "{}", walk.body);
    assert!(
        walk.body.contains("You signed in at the identity provider as Sam Lee, but no value of your claim “roles”"),
        "{}",
        walk.body
    );
    assert!(walk.body.contains("Nothing was opened"), "{}", walk.body);
    assert!(!walk.herald_cookies.contains("herald_session="));
    let written = "SELECT (SELECT count(*) FROM console_session) + (SELECT count(*) FROM audit_event)";
    assert_eq!(count(&world, written).await, 0);
    // Control: given a mapped value at the provider, the same person signs in.
    peer.set_user("sam", &User::new("Sam Lee", &["marketing", "herald-viewers"])).await.expect("promote");
    let walk = peer.sign_in(&api.base, "sam").await.expect("walk");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demotion_at_the_provider_applies_at_the_next_request_and_a_removal_ends_the_session() {
    let (world, api, peer) = start(&[("li", User::new("Li Wei", &["herald-admins"]))]).await;
    let walk = peer.sign_in(&api.base, "li").await.expect("sign-in");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
    let cookie = session_cookie(&walk.herald_cookies);
    let (status, _, page) = get(&api, "/console/audit", &cookie).await;
    assert_eq!(status, StatusCode::OK, "an admin reads the audit trail: {page}");
    assert!(page.contains("role: admin"), "{page}");

    // Demoted (and renamed) at the provider: the very next request has the new role and name.
    peer.set_user("li", &User::new("Li Wei (ops)", &["herald-viewers"])).await.expect("demote");
    let (status, _, page) = get(&api, "/console/audit", &cookie).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("view audit trail") && page.contains("role viewer"), "{page}");
    assert!(page.contains(r#"<strong id="operator-name">Li Wei (ops)</strong> · role: viewer"#), "{page}");
    let (status, _, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::OK, "a viewer still reads the overview");

    // Removed at the provider: the next request ends the session, and says why.
    peer.remove_user("li").await.expect("remove");
    let (status, location, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/login?ended=provider_withdrew"));
    let reason: Option<String> =
        sqlx::query_scalar("SELECT ended_reason FROM console_session WHERE operator_subject = 'li'")
            .fetch_one(world.db.store.pool())
            .await
            .expect("row");
    assert_eq!(reason.as_deref(), Some("provider_withdrew"));
    let (status, location, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "the ended session stays ended");
    assert!(location.starts_with("/console/login"), "{location}");
    let (_, _, login) = get(&api, "/console/login?ended=provider_withdrew", "").await;
    assert!(login.contains("the identity provider no longer lets you in"), "{login}");

    // Left without a mapped role is the same as removed.
    peer.set_user("li", &User::new("Li Wei", &["herald-admins"])).await.expect("back");
    let walk = peer.sign_in(&api.base, "li").await.expect("sign-in");
    let cookie = session_cookie(&walk.herald_cookies);
    peer.set_user("li", &User::new("Li Wei", &["alumni"])).await.expect("unmapped");
    let (status, location, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/login?ended=provider_withdrew"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_cannot_be_reached_is_named_and_the_session_is_kept() {
    let (world, api, mut peer) = start(&[("li", User::new("Li Wei", &["herald-resolvers"]))]).await;
    let walk = peer.sign_in(&api.base, "li").await.expect("sign-in");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
    let cookie = session_cookie(&walk.herald_cookies);
    let (status, _, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::OK);

    peer.stop().await.expect("stop the provider");
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    for (lang, words) in [("en", "The identity provider cannot be reached"), ("zh", "暂时无法连接身份提供方")]
    {
        let answer = client
            .get(format!("{}/console/overview?lang={lang}", api.base))
            .header(COOKIE, &cookie)
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        let removes_session = answer
            .headers()
            .get_all("set-cookie")
            .iter()
            .any(|v| v.to_str().unwrap_or_default().starts_with("herald_session="));
        assert!(!removes_session, "the session cookie is kept");
        let page = answer.text().await.expect("body");
        assert!(page.contains(words), "the provider is named: {page}");
        assert!(!page.contains("database") && !page.contains("数据库"), "not blamed on the store: {page}");
    }
    assert_eq!(
        count(&world, "SELECT count(*) FROM console_session WHERE operator_subject = 'li' AND ended_at IS NULL").await,
        1,
        "the session is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_access_token_is_sealed_with_the_sessions_cookie_and_a_copied_row_opens_nothing() {
    let (world, api, peer) = start(&[("li", User::new("Li Wei", &["herald-resolvers"]))]).await;
    let walk = peer.sign_in(&api.base, "li").await.expect("sign-in");
    assert_eq!(walk.status, StatusCode::OK, "{}", walk.body);
    let cookie = session_cookie(&walk.herald_cookies);
    let stored: String = sqlx::query_scalar("SELECT provider_grant FROM console_session WHERE operator_subject = 'li'")
        .fetch_one(world.db.store.pool())
        .await
        .expect("row");

    // The stored text is not a token the provider accepts…
    let discovery: serde_json::Value = reqwest::get(format!("{}/.well-known/openid-configuration", peer.issuer()))
        .await
        .expect("discovery")
        .json()
        .await
        .expect("json");
    let userinfo = discovery["userinfo_endpoint"].as_str().expect("userinfo endpoint");
    let answer = reqwest::Client::new().get(userinfo).bearer_auth(&stored).send().await.expect("userinfo");
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "the stored column is no access token");
    // …while the browser's cookie opens it into one the provider does accept, at every request.
    let (status, _, page) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"<strong id="operator-name">Li Wei</strong>"#), "{page}");

    // A copy of the row under another cookie (what a reader of the table could make) vouches for nothing.
    let thief = "A".repeat(43);
    sqlx::query(
        "INSERT INTO console_session (id_digest, user_id, role, credential_kind, credential_digest, credential_key, \
             credential_expires_at, csrf, created_at, last_seen_at, expires_at, operator_subject, operator_name, \
             operator_role, provider_grant) \
         SELECT sha256(convert_to($1, 'UTF8')), user_id, role, credential_kind, credential_digest, credential_key, \
             credential_expires_at, csrf, created_at, last_seen_at, expires_at, operator_subject, operator_name, \
             operator_role, provider_grant FROM console_session WHERE operator_subject = 'li'",
    )
    .bind(&thief)
    .execute(world.db.store.pool())
    .await
    .expect("copy the row");
    let (status, location, _) = get(&api, "/console/overview", &format!("herald_session={thief}")).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/login?ended=provider_withdrew"));
    let (status, _, _) = get(&api, "/console/overview", &cookie).await;
    assert_eq!(status, StatusCode::OK, "the real session still stands");
}
