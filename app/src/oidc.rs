//! The identity-provider adapter (`herald_ports::IdentityProvider`) over OpenID Connect, with the
//! `openidconnect` crate: discovery, the authorization-code flow with PKCE (S256), `state` and `nonce`, the
//! ID token's signature, issuer, audience, expiry, nonce and access-token hash, and the userinfo endpoint
//! for the role claim — at sign-in and again at every console request of the session (issue 43, item 4).
//!
//! The issuer is the operator's configuration (`[operators.oidc]`), never something a user sets, so its
//! requests do not pass the user-destination egress guard (`herald_channels::egress`): they go to the one
//! address the configuration names, https unless `allow_http_issuer` (refused by `herald serve` without
//! `--stand-ins`). The client follows no redirects (a redirect could point a request anywhere), times out
//! after ten seconds, and no token, code or verifier reaches a log or an error.

use std::time::Duration;

use async_trait::async_trait;
use herald_ports::{Identity, IdentityError, IdentityProvider, PendingSignIn, ProviderGrant, SignInStart, Standing};
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AccessToken, AccessTokenHash, AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce,
    OAuth2TokenResponse as _, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse as _,
};
use secrecy::ExposeSecret as _;

use herald_core::report::error_chain;

use crate::config::OidcConfig;

/// How long one request to the provider may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The provider of `[operators.oidc]`. Its discovery document is read at the first sign-in (and again
/// after a failed read), so `herald serve` starts while the provider is down.
pub struct OidcProvider {
    config: OidcConfig,
    http: reqwest::Client,
    metadata: tokio::sync::OnceCell<CoreProviderMetadata>,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider").field("issuer", &self.config.issuer).finish_non_exhaustive()
    }
}

fn unavailable(what: &str, error: &impl std::fmt::Display) -> IdentityError {
    IdentityError::Unavailable(format!("{what}: {error}"))
}

impl OidcProvider {
    /// # Errors
    /// The HTTP client could not be built.
    pub fn new(config: OidcConfig) -> anyhow::Result<OidcProvider> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .no_proxy()
            .build()?;
        Ok(OidcProvider { config, http, metadata: tokio::sync::OnceCell::new() })
    }

    async fn metadata(&self) -> Result<&CoreProviderMetadata, IdentityError> {
        self.metadata
            .get_or_try_init(|| async {
                let issuer = IssuerUrl::new(self.config.issuer.clone())
                    .map_err(|e| IdentityError::Refused(format!("the issuer is not a URL: {e}")))?;
                CoreProviderMetadata::discover_async(issuer, &self.http)
                    .await
                    .map_err(|e| unavailable("discovery", &error_chain(&e)))
            })
            .await
    }

    async fn client(
        &self,
    ) -> Result<
        (
            &CoreProviderMetadata,
            openidconnect::core::CoreClient<
                openidconnect::EndpointSet,
                openidconnect::EndpointNotSet,
                openidconnect::EndpointNotSet,
                openidconnect::EndpointNotSet,
                openidconnect::EndpointMaybeSet,
                openidconnect::EndpointMaybeSet,
            >,
        ),
        IdentityError,
    > {
        let metadata = self.metadata().await?;
        let redirect = RedirectUrl::new(self.config.redirect_url.clone())
            .map_err(|e| IdentityError::Refused(format!("the redirect URL is not a URL: {e}")))?;
        let client = CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(self.config.client_secret.expose_secret().to_owned())),
        )
        .set_redirect_uri(redirect);
        Ok((metadata, client))
    }

    /// The userinfo claims of `access_token`: `None` when the provider no longer accepts it (401/403).
    async fn userinfo(
        &self,
        metadata: &CoreProviderMetadata,
        access_token: &str,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, IdentityError> {
        let endpoint = metadata
            .userinfo_endpoint()
            .ok_or_else(|| IdentityError::Refused("the provider has no userinfo endpoint".to_owned()))?;
        let response = self
            .http
            .get(endpoint.url().clone())
            .bearer_auth(access_token)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| unavailable("userinfo", &error_chain(&e)))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(IdentityError::Unavailable(format!("userinfo answered {status}")));
        }
        let claims: serde_json::Map<String, serde_json::Value> =
            response.json().await.map_err(|e| IdentityError::Refused(format!("userinfo is not a JSON object: {e}")))?;
        Ok(Some(claims))
    }

    /// The values of the role claim (a string or an array of strings; anything else is none).
    fn role_values(&self, claims: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
        match claims.get(&self.config.role_claim) {
            Some(serde_json::Value::String(one)) => vec![one.clone()],
            Some(serde_json::Value::Array(many)) => many.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        }
    }
}

fn name_of(claims: &serde_json::Map<String, serde_json::Value>, fallback: &str) -> String {
    ["name", "preferred_username", "email"]
        .iter()
        .find_map(|key| claims.get(*key).and_then(|v| v.as_str()).filter(|s| !s.trim().is_empty()))
        .map_or_else(|| fallback.to_owned(), |s| s.trim().chars().take(128).collect())
}

#[async_trait]
impl IdentityProvider for OidcProvider {
    async fn begin(&self) -> Result<SignInStart, IdentityError> {
        let (_, client) = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request =
            client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok(SignInStart {
            url: url.to_string(),
            pending: PendingSignIn {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
            },
        })
    }

    async fn finish(&self, code: &str, pending: &PendingSignIn) -> Result<Identity, IdentityError> {
        let (metadata, client) = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| IdentityError::Refused(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                openidconnect::RequestTokenError::ServerResponse(answer) => {
                    IdentityError::Refused(format!("the token endpoint refused the code: {}", answer.error()))
                }
                other => unavailable("the token endpoint", &error_chain(&other)),
            })?;
        let id_token = tokens.id_token().ok_or_else(|| IdentityError::Refused("no ID token".to_owned()))?;
        let verifier = client.id_token_verifier();
        let claims = id_token
            .claims(&verifier, &Nonce::new(pending.nonce.clone()))
            .map_err(|e| IdentityError::Refused(format!("the ID token does not verify: {e}")))?;
        if let Some(expected) = claims.access_token_hash() {
            let alg = id_token.signing_alg().map_err(|e| IdentityError::Refused(e.to_string()))?;
            let key = id_token.signing_key(&verifier).map_err(|e| IdentityError::Refused(e.to_string()))?;
            let actual = AccessTokenHash::from_token(tokens.access_token(), alg, key)
                .map_err(|e| IdentityError::Refused(e.to_string()))?;
            if actual != *expected {
                return Err(IdentityError::Refused("the access token is not the ID token's".to_owned()));
            }
        }
        let subject = claims.subject().as_str().to_owned();
        let id_name = claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_owned());
        let access: &AccessToken = tokens.access_token();
        let info = self
            .userinfo(metadata, access.secret())
            .await?
            .ok_or_else(|| IdentityError::Refused("userinfo refused the new access token".to_owned()))?;
        // The userinfo answer must be about the ID token's subject (OpenID Connect Core 5.3.2).
        if info.get("sub").and_then(|v| v.as_str()) != Some(subject.as_str()) {
            return Err(IdentityError::Refused("userinfo names another subject".to_owned()));
        }
        let name = name_of(&info, id_name.as_deref().unwrap_or(&subject));
        Ok(Identity {
            role_values: self.role_values(&info),
            subject,
            name,
            grant: ProviderGrant(access.secret().clone()),
        })
    }

    async fn standing(&self, subject: &str, grant: &ProviderGrant) -> Result<Standing, IdentityError> {
        let metadata = self.metadata().await?;
        let Some(info) = self.userinfo(metadata, &grant.0).await? else { return Ok(Standing::Gone) };
        if info.get("sub").and_then(|v| v.as_str()) != Some(subject) {
            return Ok(Standing::Gone);
        }
        Ok(Standing::Present { name: name_of(&info, subject), role_values: self.role_values(&info) })
    }
}
