//! Signing in to the console with the identity provider (OpenID Connect, issue 43): begin, finish, and
//! the operator's standing at every request.
//!
//! The protocol is the adapter's ([`IdentityProvider`], in `herald-app`); here is what Herald decides:
//! the `state` the browser brings back must be the one it was given (compared in constant time, before
//! the code is used; a mismatch writes nothing), the person's role is the highest role any value of the
//! configured claim maps to ([`RoleMapping`]) — none, and they are refused with nothing written — and the
//! session opened is an ordinary console session ([`crate::sessions`]) bound to their subject, whose
//! sign-in and sign-out the audit trail records under their name. At every request of such a session
//! [`crate::sessions::find`] asks [`OidcSignIn::standing`]: gone at the provider, or left without a mapped
//! role, ends the session there; a changed role applies to that very request. Nothing is cached.

use herald_domain::operators::{Actor, ActorKind};
use herald_domain::SessionPolicy;
use herald_ports::{Credential, IdentityError, PendingSignIn, SessionRole, SignInStart, StoreError};
use subtle::ConstantTimeEq as _;

pub use crate::identity::{Now, OidcSignIn, RoleMapping};
use crate::services::Services;
use crate::sessions::{self, digest_of, Opened};

/// Why a sign-in with the provider was not completed. Nothing was written in any case.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// OpenID Connect sign-in is not configured.
    #[error("sign-in with the identity provider is not configured")]
    NotConfigured,
    /// The `state` brought back is not the one this browser was given (or it brought none): a forged or
    /// stale answer.
    #[error("the sign-in's state does not match the one this browser was given")]
    StateMismatch,
    /// The provider answered with an error instead of a code (`error=` on the redirect).
    #[error("the identity provider answered: {0}")]
    ProviderSaid(String),
    #[error(transparent)]
    Provider(#[from] IdentityError),
    /// The person has no value of the role claim that maps to a role.
    #[error("no value of the claim {claim} gives a role in Herald")]
    NoRole { claim: String, name: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Starts a sign-in: where to send the browser, and the pending secrets for it to keep.
///
/// # Errors
/// Not configured, or the provider unavailable.
pub async fn begin(services: &Services) -> Result<SignInStart, SignInError> {
    let oidc = services.oidc.as_ref().ok_or(SignInError::NotConfigured)?;
    Ok(oidc.provider.begin().await?)
}

/// What the provider sent back to the redirect address.
#[derive(Clone, Debug, Default)]
pub struct Callback {
    pub code: Option<String>,
    pub state: Option<String>,
    /// The provider's `error` and `error_description`, when it refused.
    pub error: Option<String>,
}

/// Finishes a sign-in: checks the state against `pending` (the browser's), exchanges the code, maps the
/// role and opens the operator's session, its sign-in in the audit trail.
///
/// # Errors
/// [`SignInError`]; nothing is written unless a session was opened.
pub async fn finish(
    services: &Services,
    policy: SessionPolicy,
    pending: Option<&PendingSignIn>,
    callback: Callback,
) -> Result<(Opened, Actor), SignInError> {
    let oidc = services.oidc.as_ref().ok_or(SignInError::NotConfigured)?;
    let state_ok = match (pending, callback.state.as_deref()) {
        (Some(pending), Some(state)) => {
            state.len() == pending.state.len() && bool::from(state.as_bytes().ct_eq(pending.state.as_bytes()))
        }
        _ => false,
    };
    if !state_ok {
        tracing::info!("identity-provider sign-in refused: state mismatch");
        return Err(SignInError::StateMismatch);
    }
    if let Some(error) = callback.error {
        return Err(SignInError::ProviderSaid(error));
    }
    let (Some(pending), Some(code)) = (pending, callback.code) else {
        return Err(SignInError::ProviderSaid("no code".to_owned()));
    };
    let identity = oidc.provider.finish(&code, pending).await?;
    let Some(role) = oidc.mapping.role_of(&identity.role_values) else {
        tracing::info!("identity-provider sign-in refused: no mapped role");
        return Err(SignInError::NoRole { claim: oidc.mapping.claim.clone(), name: identity.name });
    };
    let actor = Actor::new(ActorKind::Operator, identity.name.clone(), role);
    let credential = Credential::Oidc {
        digest: subject_digest(&identity.subject),
        subject: identity.subject,
        name: identity.name,
        role,
        grant: identity.grant,
    };
    let opened = sessions::open(services, policy, SessionRole::Operator, credential, Some(&actor)).await?;
    Ok((opened, actor))
}

/// The credential digest of a subject's sessions.
#[must_use]
pub fn subject_digest(subject: &str) -> herald_ports::sessions::Digest {
    digest_of(&format!("oidc\0{subject}"))
}
