//! The OpenID provider of the console's sign-in tests (issue 43): `oidc/provider.mjs`, which runs
//! `oidc-provider` from npm (an OpenID Certified implementation nobody here wrote; installed by
//! scripts/ensure-oidc-provider.sh) with one confidential client, PKCE required, and users whose role claim
//! the test changes while it runs ([`OidcPeer::set_user`], [`OidcPeer::remove_user`]).
//!
//! [`OidcPeer::sign_in`] walks the sign-in as a browser without script would — Herald's start, the
//! provider's login form, its redirects, Herald's callback — keeping each site's cookies, for the tests
//! that do not need Chromium.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

pub const CLIENT_ID: &str = "herald-console";
pub const CLIENT_SECRET: &str = "herald-tests-oidc-client-secret-0123456789";

/// The folder of `provider.mjs` and its `node_modules`: `HERALD_OIDC_PEER`, else beside this file.
#[must_use]
pub fn folder() -> PathBuf {
    std::env::var_os("HERALD_OIDC_PEER")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src").join("peers").join("oidc"), PathBuf::from)
}

/// A running provider.
pub struct OidcPeer {
    pub port: u16,
    child: Child,
}

/// One user of the provider: the name and the role claim's values.
#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub roles: Vec<String>,
}

impl User {
    #[must_use]
    pub fn new(name: &str, roles: &[&str]) -> User {
        User { name: name.to_owned(), roles: roles.iter().map(|r| (*r).to_owned()).collect() }
    }
}

impl OidcPeer {
    /// Starts the provider for a client whose redirect URI is `redirect_uri`, knowing `users` (login →
    /// user).
    ///
    /// # Errors
    /// When Node or oidc-provider is missing (run scripts/ensure-oidc-provider.sh).
    pub async fn start(redirect_uri: &str, users: &[(&str, User)]) -> anyhow::Result<OidcPeer> {
        let dir = folder();
        anyhow::ensure!(
            dir.join("node_modules").join("oidc-provider").is_dir(),
            "oidc-provider is not installed in {}: run scripts/ensure-oidc-provider.sh",
            dir.display()
        );
        let users: BTreeMap<&str, serde_json::Value> =
            users.iter().map(|(id, u)| (*id, json!({ "name": u.name, "roles": u.roles }))).collect();
        let config = json!({
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uri": redirect_uri, "users": users,
        });
        let mut child = Command::new("node")
            .arg(dir.join("provider.mjs"))
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("node provider.mjs")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let port = match tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await {
            Ok(Ok(Some(line))) => line.trim().parse::<u16>().context("the provider's port")?,
            _ => anyhow::bail!("provider.mjs did not start"),
        };
        Ok(OidcPeer { port, child })
    }

    #[must_use]
    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Adds or replaces a user (a promotion, a demotion, a new name): the provider's next answer says so.
    ///
    /// # Errors
    /// When the provider cannot be reached.
    pub async fn set_user(&self, login: &str, user: &User) -> anyhow::Result<()> {
        reqwest::Client::new()
            .put(format!("{}/_users/{login}", self.issuer()))
            .body(json!({ "name": user.name, "roles": user.roles }).to_string())
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Removes a user: the provider no longer knows them.
    ///
    /// # Errors
    /// When the provider cannot be reached.
    pub async fn remove_user(&self, login: &str) -> anyhow::Result<()> {
        reqwest::Client::new().delete(format!("{}/_users/{login}", self.issuer())).send().await?.error_for_status()?;
        Ok(())
    }

    /// Signs in to Herald at `base` as `login`, as a browser without script: Herald's start, the provider's
    /// login form, the redirects, Herald's callback.
    ///
    /// # Errors
    /// When a step does not answer as a sign-in does.
    pub async fn sign_in(&self, base: &str, login: &str) -> anyhow::Result<Walk> {
        let (mut walker, callback) = self.until_callback(base, login).await?;
        walker.finish(base, &callback).await
    }

    /// As [`OidcPeer::sign_in`], stopping before Herald's callback: the browser (its cookies) and the
    /// callback's URL, with the code and state the provider gave.
    ///
    /// # Errors
    /// When a step does not answer as a sign-in does.
    pub async fn until_callback(&self, base: &str, login: &str) -> anyhow::Result<(Walker, String)> {
        let mut walk = Walker::new();
        let (status, location, _) =
            walk.request(reqwest::Method::GET, &format!("{base}/console/oidc/start"), None).await?;
        anyhow::ensure!(status.is_redirection(), "start answered {status}");
        let mut url = location;
        // Through the provider's redirects to its login form, post it, and on until it sends us to Herald.
        for _ in 0..10 {
            if url.starts_with(base) {
                return Ok((walk, url));
            }
            let (status, location, body) = walk.request(reqwest::Method::GET, &url, None).await?;
            if status.is_redirection() {
                url = absolute(&url, &location);
                continue;
            }
            let action = between(&body, "action=\"", "\"").context("the provider's login form")?;
            let form = format!("prompt=login&login={login}&password=any");
            let (status, location, _) =
                walk.request(reqwest::Method::POST, &absolute(&url, &action), Some(form)).await?;
            anyhow::ensure!(status.is_redirection(), "the login form answered {status}");
            url = absolute(&url, &location);
        }
        anyhow::bail!("the sign-in did not come back to Herald")
    }
}

impl OidcPeer {
    /// Stops the provider (and waits until it is gone): it cannot be reached after this.
    ///
    /// # Errors
    /// The process could not be stopped.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

impl Drop for OidcPeer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Where a sign-in ended: Herald's answer to the callback.
#[derive(Debug)]
pub struct Walk {
    pub status: reqwest::StatusCode,
    pub location: String,
    pub body: String,
    /// The cookies Herald's site holds after the callback, as a `Cookie` header.
    pub herald_cookies: String,
    /// The callback's URL (with the code and state).
    pub callback: String,
}

fn between(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)? + from;
    Some(text[from..to].replace("&amp;", "&"))
}

fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    url[after..].find('/').map_or(url, |i| &url[..after + i])
}

fn absolute(current: &str, location: &str) -> String {
    if location.starts_with("http") {
        location.to_owned()
    } else {
        format!("{}{location}", origin(current))
    }
}

/// A browser without script: a cookie jar per origin (enough for loopback sites: no domains, paths
/// ignored), redirects not followed.
pub struct Walker {
    client: reqwest::Client,
    jar: BTreeMap<String, BTreeMap<String, String>>,
}

impl Default for Walker {
    fn default() -> Self {
        Walker::new()
    }
}

impl Walker {
    /// A browser with no cookies.
    #[must_use]
    pub fn new() -> Walker {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
        Walker { client, jar: BTreeMap::new() }
    }

    /// Herald's answer to `callback`, and the cookies of `base` after it.
    ///
    /// # Errors
    /// When Herald does not answer.
    pub async fn finish(&mut self, base: &str, callback: &str) -> anyhow::Result<Walk> {
        let (status, location, body) = self.request(reqwest::Method::GET, callback, None).await?;
        Ok(Walk { status, location, body, herald_cookies: self.cookies_for(base), callback: callback.to_owned() })
    }

    /// The cookies this browser holds for `url`'s origin, as a `Cookie` header.
    #[must_use]
    pub fn cookies_for(&self, url: &str) -> String {
        self.jar
            .get(origin(url))
            .map_or_else(String::new, |c| c.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; "))
    }

    /// One request with this browser's cookies; remembers the cookies of the answer.
    ///
    /// # Errors
    /// When there is no answer.
    pub async fn request(
        &mut self,
        method: reqwest::Method,
        url: &str,
        form: Option<String>,
    ) -> anyhow::Result<(reqwest::StatusCode, String, String)> {
        let mut request = self.client.request(method, url).header(COOKIE, self.cookies_for(url));
        if let Some(form) = form {
            request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(form);
        }
        let answer = request.send().await.with_context(|| url.to_owned())?;
        let jar = self.jar.entry(origin(url).to_owned()).or_default();
        for set in answer.headers().get_all(SET_COOKIE) {
            let pair = set.to_str().unwrap_or_default().split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() || set.to_str().unwrap_or_default().contains("Max-Age=0") {
                    jar.remove(name);
                } else {
                    jar.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        let status = answer.status();
        let location = answer.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        Ok((status, location, answer.text().await.unwrap_or_default()))
    }
}
