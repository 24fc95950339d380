//! The identity-provider port: the console's sign-in with OpenID Connect (issue 43), in Herald's words.
//!
//! Three steps, whatever the protocol underneath: [`IdentityProvider::begin`] makes the address to send the
//! browser to and the pending secrets the browser must bring back (state, nonce, PKCE verifier);
//! [`IdentityProvider::finish`] turns the code the provider sent back into an [`Identity`] — its subject,
//! its name and the values of the claim that says its role; [`IdentityProvider::standing`] asks the provider
//! again, at every request of a session, whether that identity still stands and with which role values.
//! Which role a claim value gives is the core's business (`herald_core::oidc`), not the adapter's.

use async_trait::async_trait;

/// What lets Herald ask the provider about a signed-in identity later (an OAuth access token). Opaque
/// here; never shown (its `Debug` is redacted).
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderGrant(pub String);

impl std::fmt::Debug for ProviderGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderGrant([redacted])")
    }
}

/// The secrets of a sign-in in progress, kept by the browser between [`IdentityProvider::begin`] and
/// [`IdentityProvider::finish`]: the `state` the provider must send back, the `nonce` the ID token must
/// carry, the PKCE `verifier` of the code's challenge.
#[derive(Clone, PartialEq, Eq)]
pub struct PendingSignIn {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

impl std::fmt::Debug for PendingSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingSignIn([redacted])")
    }
}

/// A sign-in begun: where to send the browser, and what it must bring back.
#[derive(Clone, Debug)]
pub struct SignInStart {
    pub url: String,
    pub pending: PendingSignIn,
}

/// Who the provider says signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The provider's stable id of the person (`sub`).
    pub subject: String,
    /// The name to show and to record in the audit trail.
    pub name: String,
    /// The values of the configured role claim (none when the claim is absent).
    pub role_values: Vec<String>,
    pub grant: ProviderGrant,
}

/// Whether an identity still stands at the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It does, with this name and these role values now.
    Present { name: String, role_values: Vec<String> },
    /// The provider no longer accepts it (removed, disabled, its grant revoked or expired).
    Gone,
}

/// Why a step with the provider failed. The words name no secret (no code, token or verifier).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The provider refused, or what it answered does not verify (an ID token's signature, issuer,
    /// audience or nonce; a subject that changed).
    #[error("the identity provider's answer was refused: {0}")]
    Refused(String),
    /// The provider could not be reached or answered with a server error.
    #[error("the identity provider is unavailable: {0}")]
    Unavailable(String),
}

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait IdentityProvider: Send + Sync {
    /// Starts a sign-in: the provider's address for the browser, with fresh state, nonce and PKCE challenge.
    async fn begin(&self) -> Result<SignInStart, IdentityError>;

    /// Exchanges the `code` the provider sent back (with the pending verifier), verifies the ID token
    /// (signature, issuer, audience, expiry, nonce) and reads the identity.
    async fn finish(&self, code: &str, pending: &PendingSignIn) -> Result<Identity, IdentityError>;

    /// Asks the provider now whether the identity `subject`, signed in with `grant`, still stands.
    async fn standing(&self, subject: &str, grant: &ProviderGrant) -> Result<Standing, IdentityError>;
}
