//! Operators: who may do what (issue 43).
//!
//! A person or an automation acting on Herald is an [`Actor`]: a name and a [`Role`]. A role is a set of
//! [`Capability`]s, decided here and only here ([`Role::may`]); the use cases ask [`Actor::require`]
//! before they read or write anything, so a refused act writes nothing and says which capability is
//! missing. The roles are nested — everything a viewer may, a resolver may; everything a resolver may, an
//! admin may — so each capability has one least role ([`Capability::least_role`]).

use crate::task::code;

/// What an operator is allowed, as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads: the overview, the delivery log, the review queue (read-only), a user's inbox.
    Viewer,
    /// A viewer who also decides parked tasks, sends again and sends a test on a user's behalf.
    Resolver,
    /// A resolver who also rotates keys, erases users, manages operators, acts for users and reads the
    /// configuration and the audit trail.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Resolver, Role::Admin];

    /// The stored and configured code.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Resolver => "resolver",
            Role::Admin => "admin",
        }
    }

    /// Whether this role has `capability`.
    #[must_use]
    pub fn may(self, capability: Capability) -> bool {
        self >= capability.least_role()
    }

    /// Every capability of this role, in [`Capability::ALL`]'s order.
    #[must_use]
    pub fn capabilities(self) -> Vec<Capability> {
        Capability::ALL.into_iter().filter(|c| self.may(*c)).collect()
    }
}

code!(Role, "role");

/// One thing an operator may be allowed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capability {
    /// The overview, the delivery log, a notification's timeline, the review queue, a user's inbox.
    ViewOperations,
    /// Mark a parked task sent or not sent.
    ResolveTasks,
    /// Send a parked task again.
    SendAgain,
    /// Send a test prompt to a user's stored destination on their behalf.
    TestSendForUser,
    /// Set a user's preferences, confirm or read for them, make their sign-in links.
    ActForUsers,
    /// Re-encrypt destinations under the current key.
    RotateKeys,
    /// Erase a user's data.
    EraseUsers,
    /// End other operators' sessions, change who may sign in.
    ManageOperators,
    /// Read the configuration (channels, roles).
    ViewConfiguration,
    /// Read the audit trail.
    ViewAudit,
}

impl Capability {
    pub const ALL: [Capability; 10] = [
        Capability::ViewOperations,
        Capability::ResolveTasks,
        Capability::SendAgain,
        Capability::TestSendForUser,
        Capability::ActForUsers,
        Capability::RotateKeys,
        Capability::EraseUsers,
        Capability::ManageOperators,
        Capability::ViewConfiguration,
        Capability::ViewAudit,
    ];

    /// The stored code, and the name a refusal gives.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::ViewOperations => "view_operations",
            Capability::ResolveTasks => "resolve_tasks",
            Capability::SendAgain => "send_again",
            Capability::TestSendForUser => "test_send_for_user",
            Capability::ActForUsers => "act_for_users",
            Capability::RotateKeys => "rotate_keys",
            Capability::EraseUsers => "erase_users",
            Capability::ManageOperators => "manage_operators",
            Capability::ViewConfiguration => "view_configuration",
            Capability::ViewAudit => "view_audit",
        }
    }

    /// The least role that has this capability.
    #[must_use]
    pub fn least_role(self) -> Role {
        match self {
            Capability::ViewOperations => Role::Viewer,
            Capability::ResolveTasks | Capability::SendAgain | Capability::TestSendForUser => Role::Resolver,
            Capability::ActForUsers
            | Capability::RotateKeys
            | Capability::EraseUsers
            | Capability::ManageOperators
            | Capability::ViewConfiguration
            | Capability::ViewAudit => Role::Admin,
        }
    }
}

code!(Capability, "capability");

/// How an actor proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActorKind {
    /// A person signed in through the identity provider.
    Operator,
    /// A named admin token (automation, break-glass).
    Token,
    /// The command line, run by whoever may read the configuration.
    CommandLine,
}

impl ActorKind {
    pub const ALL: [ActorKind; 3] = [ActorKind::Operator, ActorKind::Token, ActorKind::CommandLine];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Operator => "operator",
            ActorKind::Token => "token",
            ActorKind::CommandLine => "cli",
        }
    }
}

code!(ActorKind, "actor kind");

/// Who acts: a name, how it signed in, and its role.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Actor {
    pub kind: ActorKind,
    pub name: String,
    pub role: Role,
}

/// An act refused: the actor's role lacks this capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the role {role} does not have the capability {capability}")]
pub struct Forbidden {
    pub capability: Capability,
    pub role: Role,
}

impl Actor {
    #[must_use]
    pub fn new(kind: ActorKind, name: impl Into<String>, role: Role) -> Actor {
        Actor { kind, name: name.into(), role }
    }

    /// The command line: an admin (whoever runs it can read the configuration and its secrets).
    #[must_use]
    pub fn command_line(name: impl Into<String>) -> Actor {
        Actor::new(ActorKind::CommandLine, name, Role::Admin)
    }

    /// `Ok` when the actor's role has `capability`.
    ///
    /// # Errors
    /// [`Forbidden`], naming the capability.
    pub fn require(&self, capability: Capability) -> Result<(), Forbidden> {
        if self.role.may(capability) {
            Ok(())
        } else {
            Err(Forbidden { capability, role: self.role })
        }
    }

    /// How the audit trail and the timeline name the actor: `Li Wei`, `token deploy-bot`, `cli alice`.
    #[must_use]
    pub fn label(&self) -> String {
        match self.kind {
            ActorKind::Operator => self.name.clone(),
            ActorKind::Token => format!("token {}", self.name),
            ActorKind::CommandLine => format!("cli {}", self.name),
        }
    }
}

/// What an audit event records (issue 43): every human act, once, in the transaction of the act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditAction {
    /// A parked task marked sent.
    MarkSent,
    /// A parked task marked not sent.
    MarkNotSent,
    /// A parked task sent again.
    SendAgain,
    /// A test prompt sent on a user's behalf.
    TestSend,
    /// Destinations re-encrypted under the current key.
    RotateKeys,
    /// A user's data erased.
    EraseUser,
    /// An operator signed in to the console.
    SignIn,
    /// An operator signed out.
    SignOut,
}

impl AuditAction {
    pub const ALL: [AuditAction; 8] = [
        AuditAction::MarkSent,
        AuditAction::MarkNotSent,
        AuditAction::SendAgain,
        AuditAction::TestSend,
        AuditAction::RotateKeys,
        AuditAction::EraseUser,
        AuditAction::SignIn,
        AuditAction::SignOut,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::MarkSent => "mark_sent",
            AuditAction::MarkNotSent => "mark_not_sent",
            AuditAction::SendAgain => "send_again",
            AuditAction::TestSend => "test_send",
            AuditAction::RotateKeys => "rotate_keys",
            AuditAction::EraseUser => "erase_user",
            AuditAction::SignIn => "sign_in",
            AuditAction::SignOut => "sign_out",
        }
    }

    /// The action of a decision on a parked task.
    #[must_use]
    pub fn of_decision(final_state: crate::resolve::FinalState) -> AuditAction {
        match final_state {
            crate::resolve::FinalState::Sent => AuditAction::MarkSent,
            crate::resolve::FinalState::Failed => AuditAction::MarkNotSent,
            crate::resolve::FinalState::Resend => AuditAction::SendAgain,
        }
    }
}

code!(AuditAction, "audit action");

/// Whether `name` may name an operator or a token: 1 to 128 characters, no control character, not
/// blank. (A person's display name may hold spaces and any script.)
#[must_use]
pub fn valid_name(name: &str) -> bool {
    !name.trim().is_empty() && name.chars().count() <= 128 && !name.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_roles_as_the_issue_describes_them() {
        assert_eq!(Role::Viewer.capabilities(), [Capability::ViewOperations]);
        assert_eq!(
            Role::Resolver.capabilities(),
            [Capability::ViewOperations, Capability::ResolveTasks, Capability::SendAgain, Capability::TestSendForUser]
        );
        assert_eq!(Role::Admin.capabilities(), Capability::ALL);
    }

    #[test]
    fn a_refusal_names_the_missing_capability() {
        let viewer = Actor::new(ActorKind::Operator, "Li Wei", Role::Viewer);
        assert_eq!(viewer.require(Capability::ViewOperations), Ok(()));
        let refused = viewer.require(Capability::ResolveTasks).expect_err("a viewer decides nothing");
        assert_eq!(refused, Forbidden { capability: Capability::ResolveTasks, role: Role::Viewer });
        assert_eq!(refused.to_string(), "the role viewer does not have the capability resolve_tasks");
    }

    #[test]
    fn codes_round_trip_and_labels_say_how_the_actor_signed_in() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        for capability in Capability::ALL {
            assert_eq!(capability.as_str().parse::<Capability>(), Ok(capability));
        }
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>(), Ok(action));
        }
        for kind in ActorKind::ALL {
            assert_eq!(kind.as_str().parse::<ActorKind>(), Ok(kind));
        }
        assert!("owner".parse::<Role>().is_err());
        assert_eq!(Actor::new(ActorKind::Operator, "Li Wei", Role::Admin).label(), "Li Wei");
        assert_eq!(Actor::new(ActorKind::Token, "deploy", Role::Admin).label(), "token deploy");
        assert_eq!(Actor::command_line("alice").label(), "cli alice");
        assert!(valid_name("李伟") && !valid_name(" ") && !valid_name("a\nb") && !valid_name(&"x".repeat(129)));
    }

    fn role() -> impl Strategy<Value = Role> {
        prop::sample::select(Role::ALL.to_vec())
    }

    fn capability() -> impl Strategy<Value = Capability> {
        prop::sample::select(Capability::ALL.to_vec())
    }

    proptest! {
        /// A wider role never loses a capability a narrower one has.
        #[test]
        fn roles_are_nested(a in role(), b in role(), c in capability()) {
            if a <= b && a.may(c) {
                prop_assert!(b.may(c));
            }
        }

        /// `require` agrees with `may`, and a refusal names exactly what was asked.
        #[test]
        fn require_is_may(r in role(), c in capability()) {
            let actor = Actor::new(ActorKind::Token, "t", r);
            match actor.require(c) {
                Ok(()) => prop_assert!(r.may(c)),
                Err(refused) => {
                    prop_assert!(!r.may(c));
                    prop_assert_eq!(refused.capability, c);
                    prop_assert_eq!(refused.role, r);
                }
            }
        }

        /// Every capability belongs to the admin, and its least role has it while no narrower one does.
        #[test]
        fn each_capability_has_one_least_role(c in capability()) {
            prop_assert!(Role::Admin.may(c));
            let least = c.least_role();
            prop_assert!(least.may(c));
            for r in Role::ALL.into_iter().filter(|r| *r < least) {
                prop_assert!(!r.may(c));
            }
        }
    }
}
