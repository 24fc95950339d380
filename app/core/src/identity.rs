//! The identity provider as the core holds it: the provider port, which claim values give which role
//! ([`RoleMapping`]), and what the provider says of a signed-in operator now ([`OidcSignIn::standing`]).
//! The sign-in itself is [`crate::oidc`]; the request-time check is [`crate::sessions::find`].

use std::sync::Arc;

use herald_domain::operators::Role;
use herald_ports::{IdentityError, IdentityProvider, ProviderGrant, Standing};

/// Which values of which claim give which role (`[operators.oidc]` `role_claim` and `roles`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleMapping {
    /// The claim's name (`roles`, `groups`, …), as the configuration names it.
    pub claim: String,
    /// Claim value → role.
    pub roles: Vec<(String, Role)>,
}

impl RoleMapping {
    /// The highest role any of `values` maps to; `None` when none maps.
    #[must_use]
    pub fn role_of(&self, values: &[String]) -> Option<Role> {
        self.roles.iter().filter(|(value, _)| values.iter().any(|v| v == value)).map(|(_, role)| *role).max()
    }
}

/// OpenID Connect sign-in as configured: the provider and the role mapping.
#[derive(Clone)]
pub struct OidcSignIn {
    pub provider: Arc<dyn IdentityProvider>,
    pub mapping: RoleMapping,
}

impl std::fmt::Debug for OidcSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcSignIn").field("mapping", &self.mapping).finish_non_exhaustive()
    }
}

/// An OpenID Connect operator's standing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Now {
    /// They stand, with this name and role.
    Stands { name: String, role: Role },
    /// Removed at the provider, or left without a mapped role.
    Withdrawn,
}

impl OidcSignIn {
    /// Asks the provider about the operator `subject` signed in with `grant`: their name and role now.
    ///
    /// # Errors
    /// The provider is unavailable (the request is refused, the session kept).
    pub async fn standing(&self, subject: &str, grant: &ProviderGrant) -> Result<Now, IdentityError> {
        Ok(match self.provider.standing(subject, grant).await? {
            Standing::Gone => Now::Withdrawn,
            Standing::Present { name, role_values } => match self.mapping.role_of(&role_values) {
                Some(role) => Now::Stands { name, role },
                None => Now::Withdrawn,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_mapped_role_wins_and_unmapped_values_give_none() {
        let mapping = RoleMapping {
            claim: "roles".into(),
            roles: vec![("ops".into(), Role::Viewer), ("oncall".into(), Role::Resolver), ("sre".into(), Role::Admin)],
        };
        let values = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(mapping.role_of(&values(&["ops", "oncall"])), Some(Role::Resolver));
        assert_eq!(mapping.role_of(&values(&["sre", "ops"])), Some(Role::Admin));
        assert_eq!(mapping.role_of(&values(&["marketing"])), None);
        assert_eq!(mapping.role_of(&[]), None);
    }
}
