//! The console as a browser without script speaks to it: a signed-in session (its cookie) and the CSRF
//! token of its forms, form posts, redirects not followed — for tests that compare what the console and
//! the API store, without a browser.

use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;

use crate::api::Api;

/// One signed-in console session.
pub struct Console {
    base: String,
    client: reqwest::Client,
    cookie: String,
    csrf: String,
}

/// One answer of the console.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub location: String,
    pub body: String,
}

/// A form value, percent-encoded.
#[must_use]
pub fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Console {
    fn client() -> reqwest::Client {
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
    }

    async fn signed_in(api: &Api, client: reqwest::Client, answer: reqwest::Response, first_page: &str) -> Console {
        let set = answer.headers().get(SET_COOKIE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let cookie = set.split(';').next().unwrap_or_default().to_owned();
        assert!(cookie.contains("herald_session="), "signed in: {} {set}", answer.status());
        let mut console = Console { base: api.base.clone(), client, cookie, csrf: String::new() };
        let page = console.get(first_page).await;
        let at = page.body.find("name=\"csrf\" value=\"").unwrap_or_else(|| panic!("a form on {first_page}"));
        console.csrf = page.body[at + 19..at + 19 + 32].to_owned();
        console
    }

    /// `user`'s session, opened through a one-time sign-in link as the user would.
    ///
    /// # Panics
    /// When signing in fails.
    pub async fn user(api: &Api, user: &str) -> Console {
        let client = Self::client();
        let link = api.sign_in_link(user).await;
        let code = link.split_once("code=").expect("a code").1.to_owned();
        let answer = client
            .post(format!("{}/console/login/user", api.base))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(format!("code={code}"))
            .send()
            .await
            .expect("sign in");
        Self::signed_in(api, client, answer, "/console/me/inbox").await
    }

    /// An operator's session, signed in with `admin_token`.
    ///
    /// # Panics
    /// When signing in fails.
    pub async fn operator(api: &Api, admin_token: &str) -> Console {
        let client = Self::client();
        let answer = client
            .post(format!("{}/console/login", api.base))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(format!("token={}", form_value(admin_token)))
            .send()
            .await
            .expect("sign in");
        Self::signed_in(api, client, answer, "/console/review").await
    }

    async fn page(answer: reqwest::Response) -> Page {
        let status = answer.status();
        let location = answer.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        Page { status, location, body: answer.text().await.expect("body") }
    }

    /// A page of the session.
    ///
    /// # Panics
    /// When the console does not answer.
    pub async fn get(&self, path: &str) -> Page {
        let answer = self.client.get(format!("{}{path}", self.base)).header(COOKIE, &self.cookie).send().await;
        Self::page(answer.expect("the console answers")).await
    }

    /// A form post of the session: `fields` (already encoded, `a=b&c=d`) with the session's CSRF token.
    ///
    /// # Panics
    /// When the console does not answer.
    pub async fn post(&self, path: &str, fields: &str) -> Page {
        let body =
            if fields.is_empty() { format!("csrf={}", self.csrf) } else { format!("csrf={}&{fields}", self.csrf) };
        let answer = self
            .client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(body)
            .send()
            .await;
        Self::page(answer.expect("the console answers")).await
    }
}
