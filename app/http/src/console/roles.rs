//! The console's words for operators, roles, capabilities and the audit trail, in both languages — kept
//! apart from [`super::i18n`]'s page texts.

use herald_domain::operators::{Capability, Role};

use super::i18n::Lang;

/// Every text about operators, in one language.
pub struct RoleWords {
    /// "This needs the capability {capability}, which the role {role} does not have. Nothing was done."
    pub missing_capability: &'static str,
    pub viewer: &'static str,
    pub resolver: &'static str,
    pub admin: &'static str,
    pub capabilities: [&'static str; 10],
    /// The review queue of an operator who may not decide.
    pub read_only: &'static str,
}

impl RoleWords {
    #[must_use]
    pub fn role(&self, role: Role) -> &'static str {
        match role {
            Role::Viewer => self.viewer,
            Role::Resolver => self.resolver,
            Role::Admin => self.admin,
        }
    }

    #[must_use]
    pub fn capability(&self, capability: Capability) -> &'static str {
        let i = Capability::ALL.iter().position(|c| *c == capability).unwrap_or(0);
        self.capabilities[i]
    }
}

impl Lang {
    /// The words about operators in this language.
    #[must_use]
    pub fn roles(self) -> &'static RoleWords {
        match self {
            Lang::En => &EN,
            Lang::Zh => &ZH,
        }
    }
}

pub static EN: RoleWords = RoleWords {
    missing_capability:
        "This needs the capability “{capability}”, which the role {role} does not have. Nothing was done.",
    viewer: "viewer",
    resolver: "resolver",
    admin: "admin",
    capabilities: [
        "view operations",
        "resolve tasks",
        "send again",
        "test send for a user",
        "act for users",
        "rotate keys",
        "erase users",
        "manage operators",
        "view configuration",
        "view audit trail",
    ],
    read_only: "Your role reads this queue; deciding needs the role resolver or admin.",
};

pub static ZH: RoleWords = RoleWords {
    missing_capability: "此操作需要“{capability}”权限，角色“{role}”没有该权限。未做任何更改。",
    viewer: "查看者",
    resolver: "处理者",
    admin: "管理员",
    capabilities: [
        "查看运行情况",
        "处理任务",
        "重新发送",
        "代用户测试发送",
        "代用户操作",
        "轮换密钥",
        "删除用户数据",
        "管理运营人员",
        "查看配置",
        "查看审计记录",
    ],
    read_only: "你的角色只能查看此队列；处理任务需要“处理者”或“管理员”角色。",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_and_role_has_words_in_both_languages() {
        for lang in [Lang::En, Lang::Zh] {
            let w = lang.roles();
            let names: std::collections::HashSet<_> = Capability::ALL.iter().map(|c| w.capability(*c)).collect();
            assert_eq!(names.len(), Capability::ALL.len(), "one distinct name per capability");
            assert!(Role::ALL.iter().all(|r| !w.role(*r).is_empty()));
        }
    }
}
