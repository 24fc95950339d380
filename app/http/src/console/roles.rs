//! The console's words for operators, roles, capabilities and the audit trail, in both languages — kept
//! apart from [`super::i18n`]'s page texts.

use herald_domain::operators::{AuditAction, Capability, Role};

use herald_domain::resolve::FinalState;

use super::i18n::{fill, Lang, Words};

impl Words {
    /// The words about operators in this page's language.
    #[must_use]
    pub fn roles(&self) -> &'static RoleWords {
        if std::ptr::eq(self, &super::i18n::ZH) {
            &ZH
        } else {
            &EN
        }
    }
}

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
    /// A decision with who made it: "marked sent by {name}", "marked not sent by {name}", "sent again at
    /// the request of {name}".
    pub decided: [&'static str; 3],
    pub audit_title: &'static str,
    pub audit_intro: &'static str,
    pub audit_actor: &'static str,
    pub audit_action: &'static str,
    pub audit_any: &'static str,
    pub audit_since: &'static str,
    pub audit_until: &'static str,
    pub audit_filter: &'static str,
    pub audit_none: &'static str,
    pub audit_when: &'static str,
    pub audit_role: &'static str,
    pub audit_target: &'static str,
    pub audit_detail: &'static str,
    pub audit_older: &'static str,
    pub audit_bad_day: &'static str,
    /// The actions of [`AuditAction::ALL`], in its order.
    pub actions: [&'static str; 8],
}

impl RoleWords {
    #[must_use]
    pub fn action(&self, action: AuditAction) -> &'static str {
        let i = AuditAction::ALL.iter().position(|a| *a == action).unwrap_or(0);
        self.actions[i]
    }

    /// A human decision with who made it.
    #[must_use]
    pub fn decided_by(&self, decision: FinalState, name: &str) -> String {
        let template = match decision {
            FinalState::Sent => self.decided[0],
            FinalState::Failed => self.decided[1],
            FinalState::Resend => self.decided[2],
        };
        fill(template, &[("name", name)])
    }

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
    decided: ["marked sent by {name}", "marked not sent by {name}", "sent again at the request of {name}"],
    audit_title: "Audit trail",
    audit_intro: "Every human act, newest first. Nothing here can be changed or removed.",
    audit_actor: "Who",
    audit_action: "Action",
    audit_any: "any",
    audit_since: "From (UTC day)",
    audit_until: "To (UTC day)",
    audit_filter: "Filter",
    audit_none: "No event matches.",
    audit_when: "When",
    audit_role: "Role",
    audit_target: "On",
    audit_detail: "Detail",
    audit_older: "Older",
    audit_bad_day: "A day must be written as YYYY-MM-DD.",
    actions: [
        "marked sent",
        "marked not sent",
        "sent again",
        "test send for a user",
        "keys rotated",
        "user erased",
        "signed in",
        "signed out",
    ],
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
    decided: ["由 {name} 标记为已发送", "由 {name} 标记为未发送", "应 {name} 的要求重新发送"],
    audit_title: "审计记录",
    audit_intro: "所有人工操作，最新的在前。此处的记录不可更改或删除。",
    audit_actor: "操作人",
    audit_action: "操作",
    audit_any: "全部",
    audit_since: "起始日期（UTC）",
    audit_until: "截止日期（UTC）",
    audit_filter: "筛选",
    audit_none: "没有符合条件的记录。",
    audit_when: "时间",
    audit_role: "角色",
    audit_target: "对象",
    audit_detail: "详情",
    audit_older: "更早",
    audit_bad_day: "日期格式须为 YYYY-MM-DD。",
    actions: [
        "标记为已发送",
        "标记为未发送",
        "重新发送",
        "代用户测试发送",
        "轮换密钥",
        "删除用户数据",
        "登录",
        "退出登录",
    ],
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
