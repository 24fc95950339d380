//! The console's two languages: English and Simplified Chinese.
//!
//! **Choice.** A `?lang=en|zh` link (the switch on every page) wins and is remembered in a `herald_lang`
//! cookie; otherwise the cookie; otherwise the first of `Accept-Language` that is one of ours (`zh*` →
//! Chinese, anything else → English). The choice is never part of the session, so signing in or out does
//! not change it.
//!
//! **Words.** Every text a page shows is a field of [`Words`], and each language is one `const` of it: a
//! missing translation is a compile error, not a blank on a page. Status words follow SPEC §1: SENT is
//! "accepted by channel" / "第三方已接受" — the console never says "delivered" or "已送达" (a test holds
//! both constants to that).

use axum::http::{header, HeaderMap};
use herald_domain::resolve::FinalState;
use herald_domain::{Capability, Outcome, TaskState};

/// A language of the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    En,
    Zh,
}

/// The cookie that remembers the switch.
pub const LANG_COOKIE: &str = "herald_lang";

impl Lang {
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    /// The `lang` attribute of the page.
    #[must_use]
    pub fn html_lang(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-Hans",
        }
    }

    #[must_use]
    pub fn parse(code: &str) -> Option<Lang> {
        match code.trim().to_ascii_lowercase().as_str() {
            "en" => Some(Lang::En),
            "zh" | "zh-cn" | "zh-hans" => Some(Lang::Zh),
            _ => None,
        }
    }

    /// The language of a request: explicit choice, then the cookie, then `Accept-Language`.
    #[must_use]
    pub fn of_request(explicit: Option<&str>, headers: &HeaderMap) -> Lang {
        if let Some(lang) = explicit.and_then(Lang::parse) {
            return lang;
        }
        if let Some(lang) = super::session::cookie(headers, LANG_COOKIE).and_then(|v| Lang::parse(&v)) {
            return lang;
        }
        let accept = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
        Lang::from_accept_language(accept)
    }

    /// The best of ours in an `Accept-Language` value, by its q-values (ties: the order given).
    #[must_use]
    pub fn from_accept_language(value: &str) -> Lang {
        let mut best: Option<(f32, Lang)> = None;
        for part in value.split(',') {
            let mut pieces = part.split(';');
            let tag = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = pieces.find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.parse::<f32>().ok())).unwrap_or(1.0);
            let lang = if tag.starts_with("zh") {
                Lang::Zh
            } else if tag.starts_with("en") {
                Lang::En
            } else {
                continue;
            };
            if best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, lang));
            }
        }
        best.map_or(Lang::En, |(_, lang)| lang)
    }

    #[must_use]
    pub fn words(self) -> &'static Words {
        match self {
            Lang::En => &EN,
            Lang::Zh => &ZH,
        }
    }
}

/// Every text of the console, in one language.
#[allow(clippy::struct_field_names)]
pub struct Words {
    pub product: &'static str,
    pub switch_to: &'static str,
    pub skip: &'static str,
    pub nav_overview: &'static str,
    pub nav_review: &'static str,
    pub nav_log: &'static str,
    pub nav_inbox: &'static str,
    pub nav_channels: &'static str,
    pub sign_out: &'static str,
    pub signed_in_as_operator: &'static str,
    /// Before the name, with the space it needs (none after a full-width colon).
    pub signed_in_as_user: &'static str,

    pub signin_title: &'static str,
    pub signin_intro: &'static str,
    pub signin_token: &'static str,
    pub signin_button: &'static str,
    pub signin_failed: &'static str,
    pub signin_required: &'static str,
    pub signed_out: &'static str,
    pub csrf_refused: &'static str,
    pub forbidden: &'static str,
    pub session_ended: &'static str,
    pub ended_signed_out: &'static str,
    pub ended_by_holder: &'static str,
    pub ended_by_operator: &'static str,
    pub ended_idle: &'static str,
    pub ended_expired: &'static str,
    pub ended_credential_expired: &'static str,
    pub ended_credential_revoked: &'static str,
    pub ended_provider_withdrew: &'static str,
    pub link_title: &'static str,
    pub link_intro: &'static str,
    pub link_button: &'static str,
    pub link_failed: &'static str,
    pub link_old_form: &'static str,
    pub nav_sessions: &'static str,
    pub sessions_title: &'static str,
    pub sessions_intro: &'static str,
    pub session_this: &'static str,
    pub session_started: &'static str,
    pub session_last_seen: &'static str,
    pub session_ends: &'static str,
    pub session_how: &'static str,
    pub session_by_admin_token: &'static str,
    pub session_by_user_token: &'static str,
    pub session_by_link: &'static str,
    pub session_by_provider: &'static str,
    pub session_end_button: &'static str,
    pub session_ended_one: &'static str,
    pub not_found: &'static str,
    pub store_down: &'static str,
    /// A page of an erased user, or their sign-in (410).
    pub user_gone: &'static str,

    pub overview_title: &'static str,
    pub col_channel: &'static str,
    pub col_contract: &'static str,
    pub col_interval: &'static str,
    pub col_next_slot: &'static str,
    pub col_tasks: &'static str,
    pub col_parked: &'static str,
    pub col_last_hour: &'static str,
    pub col_last_error: &'static str,
    pub slot_free: &'static str,
    pub none: &'static str,
    pub parked_total: &'static str,
    pub status_events_parked: &'static str,
    pub status_events_title: &'static str,
    pub status_events_intro: &'static str,
    pub col_subscription: &'static str,
    pub col_event: &'static str,
    pub col_notification: &'static str,
    pub col_posts: &'static str,
    pub col_parked_at: &'static str,
    pub contract_idempotent: &'static str,
    pub contract_queryable: &'static str,
    pub contract_neither: &'static str,

    pub review_title: &'static str,
    pub review_intro: &'static str,
    pub filter_channel: &'static str,
    pub filter_any: &'static str,
    pub filter_min_age: &'static str,
    pub filter_apply: &'static str,
    pub review_empty: &'static str,
    pub older: &'static str,
    pub why_parked: &'static str,
    pub what_to_check: &'static str,
    pub check_idempotent: &'static str,
    pub check_queryable: &'static str,
    pub check_neither: &'static str,
    pub note_label: &'static str,
    pub mark_sent: &'static str,
    pub mark_failed: &'static str,
    pub send_again: &'static str,
    pub note_required: &'static str,
    pub conflict: &'static str,
    pub resolved: &'static str,
    pub parked_since: &'static str,
    pub task: &'static str,
    pub user: &'static str,
    pub notification: &'static str,
    pub reference: &'static str,
    pub attempts_spent: &'static str,

    pub col_no: &'static str,
    pub col_action: &'static str,
    pub col_outcome: &'static str,
    pub col_late: &'static str,
    pub col_started: &'static str,
    pub col_finished: &'static str,
    pub col_detail: &'static str,

    pub log_title: &'static str,
    pub log_intro: &'static str,
    pub log_query: &'static str,
    pub log_user: &'static str,
    pub log_event: &'static str,
    pub log_find: &'static str,
    pub log_nothing: &'static str,
    pub notification_title: &'static str,
    pub body: &'static str,
    pub event_key: &'static str,
    pub created: &'static str,
    pub expires: &'static str,
    pub in_app_only: &'static str,
    pub user_inbox_title: &'static str,
    pub erase_title: &'static str,
    pub erase_explain: &'static str,
    pub erase_confirm: &'static str,
    pub erase_button: &'static str,
    pub erase_done: &'static str,
    pub erase_repeat: &'static str,
    pub erase_mismatch: &'static str,

    pub inbox_title: &'static str,
    pub inbox_empty: &'static str,
    pub unread: &'static str,
    pub read: &'static str,
    pub mark_read: &'static str,

    pub channels_title: &'static str,
    pub channels_intro: &'static str,
    pub destination_label: &'static str,
    pub enabled_label: &'static str,
    pub save: &'static str,
    pub saved: &'static str,
    pub dest_set: &'static str,
    pub dest_not_set: &'static str,
    pub verified: &'static str,
    pub not_verified: &'static str,
    pub on: &'static str,
    pub off: &'static str,
    pub send_test: &'static str,
    pub test_accepted: &'static str,
    pub i_received_it: &'static str,
    pub test_refused: &'static str,
    pub test_not_sent: &'static str,
    pub test_unknown: &'static str,
    pub test_too_soon: &'static str,
    pub test_quota: &'static str,
    pub test_no_destination: &'static str,
    pub confirmed: &'static str,
    pub nothing_to_confirm: &'static str,
    pub need_destination: &'static str,
    pub bad_destination: &'static str,
    pub subscription_expired: &'static str,

    // Status words (SPEC §1).
    pub st_accepted: &'static str,
    pub st_sending: &'static str,
    pub st_pending: &'static str,
    pub st_retry: &'static str,
    pub st_refused: &'static str,
    pub st_expired: &'static str,
    pub st_off: &'static str,
    pub st_gone: &'static str,
    pub st_unknown_checking: &'static str,
    pub st_unknown_review: &'static str,
    pub st_digest: &'static str,
    pub by_operator_sent: &'static str,
    pub by_operator_failed: &'static str,
    pub by_operator_resend: &'static str,

    /// The colon after a label: `": "` in English, the full-width `"："` in Chinese.
    pub colon: &'static str,
    pub resolved_resend: &'static str,
    pub what_happened: &'static str,
    pub log_event_alone: &'static str,
    pub open_notification: &'static str,
    pub page_not_found: &'static str,
    pub age_now: &'static str,
    pub age_min: &'static str,
    pub age_hour: &'static str,
    pub age_day: &'static str,
    pub chart_hour: &'static str,
    pub chart_day: &'static str,
    pub chart_desc: &'static str,
    pub chart_numbers: &'static str,
    pub chart_hour_ago: &'static str,
    pub chart_day_ago: &'static str,
    pub chart_now: &'static str,
    pub chart_axis: &'static str,
    pub chart_from: &'static str,
    pub ch_accepted: &'static str,
    pub ch_refused: &'static str,
    pub ch_unknown: &'static str,
    pub ch_decided: &'static str,
    pub ch_parked: &'static str,
    pub test_result_label: &'static str,
}

impl Words {
    /// Why a session ended, in words.
    #[must_use]
    pub fn session_end(&self, end: herald_domain::SessionEnd) -> &'static str {
        use herald_domain::SessionEnd;
        match end {
            SessionEnd::SignedOut => self.ended_signed_out,
            SessionEnd::EndedByHolder => self.ended_by_holder,
            SessionEnd::EndedByOperator => self.ended_by_operator,
            SessionEnd::Idle => self.ended_idle,
            SessionEnd::Expired => self.ended_expired,
            SessionEnd::CredentialExpired => self.ended_credential_expired,
            SessionEnd::CredentialRevoked => self.ended_credential_revoked,
            SessionEnd::ProviderWithdrew => self.ended_provider_withdrew,
        }
    }
}

pub static EN: Words = Words {
    product: "Herald console",
    switch_to: "中文",
    skip: "Skip to content",
    nav_overview: "Overview",
    nav_review: "Review queue",
    nav_log: "Delivery log",
    nav_inbox: "Inbox",
    nav_channels: "Channels",
    sign_out: "Sign out",
    signed_in_as_operator: "role: {role}",
    signed_in_as_user: "Signed in as ",

    signin_title: "Sign in",
    signin_intro: "Sign in with the access token you were given. If you were sent a personal sign-in link, open that link instead.",
    signin_token: "Access token",
    signin_button: "Sign in",
    signin_failed: "That token is not an admin token or a user token; nothing was opened.",
    signin_required: "Please sign in to open that page.",
    signed_out: "You are signed out.",
    csrf_refused: "This form has expired or did not come from this console; nothing was changed. Please try again.",
    forbidden: "This page belongs to someone else.",
    session_ended: "Your session has ended ({why}). Please sign in again.",
    ended_signed_out: "you signed out",
    ended_by_holder: "it was ended from your list of sessions",
    ended_by_operator: "an operator ended it",
    ended_idle: "no activity for too long",
    ended_expired: "it reached its time limit",
    ended_credential_expired: "the token you signed in with expired",
    ended_credential_revoked: "the token you signed in with is no longer accepted",
    ended_provider_withdrew: "the identity provider no longer lets you in with a role in Herald",
    link_title: "Sign in with your link",
    link_intro: "This link signs you in once. Continue to open your inbox; the link then stops working.",
    link_button: "Continue",
    link_failed: "This sign-in link does not work: it was used already, it expired, or it was never issued. Ask for a new one.",
    link_old_form: "Sign-in links no longer carry a token. Ask for a new link, or sign in with your token.",
    nav_sessions: "Sessions",
    sessions_title: "Your sessions",
    sessions_intro: "Every browser signed in as you. End any session you do not recognise: it stops working at once.",
    session_this: "this browser",
    session_started: "Signed in",
    session_last_seen: "Last active",
    session_ends: "Ends at the latest",
    session_how: "Signed in with",
    session_by_admin_token: "an admin token",
    session_by_user_token: "a user token",
    session_by_link: "a sign-in link",
    session_by_provider: "the identity provider",
    session_end_button: "End session",
    session_ended_one: "The session was ended.",
    not_found: "Not found.",
    store_down: "The database is not answering right now; nothing was changed. Please try again.",
    user_gone: "This user was erased: Herald shows and sends nothing more for them.",

    overview_title: "Overview",
    col_channel: "Channel",
    col_contract: "Contract",
    col_interval: "Interval",
    col_next_slot: "Next free slot",
    col_tasks: "Tasks by state",
    col_parked: "Parked",
    col_last_hour: "Attempts, last hour",
    col_last_error: "Last error class",
    slot_free: "free now",
    none: "none",
    parked_total: "Tasks waiting for a person",
    status_events_parked: "Status events their endpoint kept refusing",
    status_events_title: "Parked status events",
    status_events_intro: "Herald stopped posting these status events: their subscription's endpoint refused every post (an answer other than 2xx, a timeout, or no connection). The deliveries themselves are unaffected; the calling service has not been told of these changes.",
    col_subscription: "Subscription",
    col_event: "Event",
    col_notification: "Notification",
    col_posts: "Posts",
    col_parked_at: "Parked at",
    contract_idempotent: "Idempotent: after an unknown outcome Herald sends again with the same idempotency key; the channel drops the duplicate.",
    contract_queryable: "Queryable: after an unknown outcome Herald asks the channel by reference and sends again only when it has no record.",
    contract_neither: "Neither key nor query: an unknown outcome is never sent again automatically; it waits here for a person.",

    review_title: "Review queue",
    review_intro: "Parked tasks: the channel's answer never came back and Herald cannot find out by itself. Check, then decide once.",
    filter_channel: "Channel",
    filter_any: "any",
    filter_min_age: "Parked for at least (minutes)",
    filter_apply: "Filter",
    review_empty: "No task is waiting for review.",
    older: "Older tasks",
    why_parked: "Why it is parked",
    what_to_check: "What to check",
    check_idempotent: "The channel keeps idempotency keys: ask it whether it holds the key ntf-{ref}.",
    check_queryable: "The channel can be asked by reference: look up ref {ref} in its records.",
    check_neither: "{channel} has no idempotency key and no query: ask the user whether the message arrived.",
    note_label: "Note (required): what you checked",
    mark_sent: "Mark sent",
    mark_failed: "Mark not sent",
    send_again: "Send again",
    note_required: "A note is required: say what you checked.",
    conflict: "Task {task} was already settled (it is {state} now); your decision changed nothing.",
    resolved: "Task {task}: {words}.",
    parked_since: "parked since",
    task: "Task",
    user: "User",
    notification: "Notification",
    reference: "Reference",
    attempts_spent: "attempts",

    col_no: "#",
    col_action: "Action",
    col_outcome: "Outcome",
    col_late: "Late outcome",
    col_started: "Started",
    col_finished: "Finished",
    col_detail: "Detail / note",

    log_title: "Delivery log",
    log_intro: "Find a notification by its id or a task reference, or by user id and event key. A user id alone shows that user's inbox.",
    log_query: "Notification id or task reference",
    log_user: "User id",
    log_event: "Event key",
    log_find: "Find",
    log_nothing: "Nothing matches.",
    notification_title: "Notification",
    body: "Text",
    event_key: "Event key",
    created: "Created",
    expires: "Expires",
    in_app_only: "in-app only",
    user_inbox_title: "Inbox of user",
    erase_title: "Erase this user",
    erase_explain: "From the moment it is recorded nothing more is sent to this user: every notification not yet \
                    handed to a channel is settled, their destinations are destroyed, later submissions for them are \
                    refused. A call already under way is not recalled. This cannot be undone.",
    erase_confirm: "Type the user id to confirm",
    erase_button: "Erase user",
    erase_done: "The user was erased: nothing more will be sent to them.",
    erase_repeat: "This user was erased before; nothing changed.",
    erase_mismatch: "The id typed does not match this user; nothing was erased.",

    inbox_title: "Your inbox",
    inbox_empty: "Nothing here yet.",
    unread: "unread",
    read: "read",
    mark_read: "Mark as read",

    channels_title: "Your channels",
    channels_intro: "Where Herald may reach you. A destination is stored encrypted and never shown again — only whether it is set and verified.",
    destination_label: "New destination (leave empty to keep the stored one)",
    enabled_label: "Enabled",
    save: "Save",
    saved: "Saved.",
    dest_set: "destination set",
    dest_not_set: "no destination",
    verified: "verified",
    not_verified: "not verified",
    on: "on",
    off: "off",
    send_test: "Send test",
    test_accepted: "Accepted by {channel} — did it arrive?",
    i_received_it: "I received it",
    test_refused: "Refused by {channel}: {why}. Nothing was verified.",
    test_not_sent: "Not sent: {channel} could not be reached. Nothing was verified.",
    test_unknown: "No answer from {channel} that Herald could read (none in time, a broken connection, or one it does not recognise) — we cannot tell whether it arrived. Not retried.",
    test_too_soon: "Too soon for {channel}: try again in {secs} s.",
    test_quota: "You have used your test sends on {channel} for now: try again in {secs} s.",
    test_no_destination: "Set a destination first.",
    confirmed: "Verified: you confirmed that the test arrived.",
    nothing_to_confirm: "There is no accepted test to the stored destination to confirm.",
    need_destination: "A destination is needed to enable this channel.",
    bad_destination: "This channel cannot take that destination (its form, its length or the address it names); nothing was saved.",
    subscription_expired: "The push service said this browser subscription expired: subscribe again in the browser, then save the new subscription.",

    st_accepted: "accepted by channel",
    st_sending: "sending",
    st_pending: "pending",
    st_retry: "waiting to retry",
    st_refused: "not sent: refused",
    st_expired: "not sent: expired",
    st_off: "not sent: channel off",
    st_gone: "not sent: subscription expired",
    st_unknown_checking: "outcome unknown — being checked",
    st_unknown_review: "outcome unknown — waiting for a person",
    st_digest: "merged into a digest",
    by_operator_sent: "marked sent by an operator",
    by_operator_failed: "marked not sent by an operator",
    by_operator_resend: "sent again at an operator's request",

    colon: ": ",
    resolved_resend: "Task {task}: queued to be sent again, as an operator asked. Nothing is sent until a worker takes it; its timeline will show the new attempt.",
    what_happened: "What happened",
    log_event_alone: "An event key is unique per user only, so it cannot name a notification by itself: enter the user id as well, or search by the notification id or a task reference.",
    open_notification: "Open notification",
    page_not_found: "There is no console page at this address.",
    age_now: "less than a minute ago",
    age_min: "{n} min ago",
    age_hour: "{h} h {m} min ago",
    age_day: "{d} d {h} h ago",
    chart_hour: "Last hour, per minute",
    chart_day: "Last day, per hour",
    chart_desc: "{accepted} accepted by channel, {refused} refused or not sent, {unknown} outcome unknown, {decided} decided by an operator; {parked} parked, still waiting.",
    chart_numbers: "The numbers behind the chart",
    chart_hour_ago: "60 min ago",
    chart_day_ago: "24 h ago",
    chart_now: "now",
    chart_axis: "attempts",
    chart_from: "From",
    ch_accepted: "accepted by channel",
    ch_refused: "refused or not sent",
    ch_unknown: "outcome unknown",
    ch_decided: "decided by an operator",
    ch_parked: "parked, still waiting",
    test_result_label: "Last test",
};

pub static ZH: Words = Words {
    product: "Herald 控制台",
    switch_to: "English",
    skip: "跳到正文",
    nav_overview: "概览",
    nav_review: "待处理",
    nav_log: "投递记录",
    nav_inbox: "消息",
    nav_channels: "渠道",
    sign_out: "退出",
    signed_in_as_operator: "角色：{role}",
    signed_in_as_user: "已登录：",

    signin_title: "登录",
    signin_intro: "使用发给你的访问令牌登录。如果你收到的是个人登录链接，请直接打开该链接。",
    signin_token: "访问令牌",
    signin_button: "登录",
    signin_failed: "该令牌既不是管理员令牌也不是用户令牌，未打开任何页面。",
    signin_required: "请先登录再打开该页面。",
    signed_out: "你已退出。",
    csrf_refused: "该表单已过期或并非来自本控制台，未作任何更改。请重试。",
    forbidden: "该页面属于其他用户。",
    session_ended: "你的会话已结束（{why}）。请重新登录。",
    ended_signed_out: "你已退出",
    ended_by_holder: "已在你的会话列表中被结束",
    ended_by_operator: "运营人员结束了该会话",
    ended_idle: "长时间没有操作",
    ended_expired: "已达到时间上限",
    ended_credential_expired: "登录所用的令牌已过期",
    ended_credential_revoked: "登录所用的令牌已不再被接受",
    ended_provider_withdrew: "身份提供方已不再给予您 Herald 中的角色",
    link_title: "使用你的链接登录",
    link_intro: "此链接只能登录一次。点击继续打开你的收件箱，之后该链接即失效。",
    link_button: "继续",
    link_failed: "该登录链接无效：它已被使用、已过期，或从未签发。请索取新的链接。",
    link_old_form: "登录链接不再携带令牌。请索取新的链接，或使用你的令牌登录。",
    nav_sessions: "会话",
    sessions_title: "你的会话",
    sessions_intro: "以你的身份登录的每个浏览器。结束任何你不认识的会话：它会立即失效。",
    session_this: "当前浏览器",
    session_started: "登录时间",
    session_last_seen: "最近活动",
    session_ends: "最迟结束于",
    session_how: "登录方式",
    session_by_admin_token: "管理员令牌",
    session_by_user_token: "用户令牌",
    session_by_link: "登录链接",
    session_by_provider: "身份提供方",
    session_end_button: "结束会话",
    session_ended_one: "该会话已结束。",
    not_found: "未找到。",
    store_down: "数据库暂时无响应，未作任何更改。请重试。",
    user_gone: "该用户已被删除：Herald 不再为其显示或发送任何内容。",

    overview_title: "概览",
    col_channel: "渠道",
    col_contract: "渠道约定",
    col_interval: "调用间隔",
    col_next_slot: "下一个可用时刻",
    col_tasks: "各状态任务数",
    col_parked: "已挂起",
    col_last_hour: "最近一小时的尝试",
    col_last_error: "最近错误类别",
    slot_free: "现在可用",
    none: "无",
    parked_total: "等待人工处理的任务",
    status_events_parked: "接收端持续拒收的状态事件",
    status_events_title: "已挂起的状态事件",
    status_events_intro: "这些状态事件已停止推送：订阅的接收端拒收了每一次推送（非 2xx 应答、超时或无法连接）。通知的投递本身不受影响；调用方服务尚未得知这些变化。",
    col_subscription: "订阅",
    col_event: "事件",
    col_notification: "通知",
    col_posts: "推送次数",
    col_parked_at: "挂起时间",
    contract_idempotent: "幂等：结果未知时以相同幂等键重发，渠道会丢弃重复请求。",
    contract_queryable: "可查询：结果未知时按编号向渠道查询，只有查无记录才重发。",
    contract_neither: "既无幂等键也不可查询：结果未知时绝不自动重发，在此等待人工处理。",

    review_title: "待处理",
    review_intro: "已挂起的任务：渠道的应答没有回来，Herald 无法自行确认。请核实后只做一次决定。",
    filter_channel: "渠道",
    filter_any: "全部",
    filter_min_age: "挂起至少（分钟）",
    filter_apply: "筛选",
    review_empty: "没有等待处理的任务。",
    older: "更早的任务",
    why_parked: "挂起原因",
    what_to_check: "需要核实",
    check_idempotent: "该渠道保存幂等键：请询问渠道是否有键 ntf-{ref}。",
    check_queryable: "该渠道可按编号查询：请在其记录中查找 ref {ref}。",
    check_neither: "{channel} 既无幂等键也不可查询：请询问用户是否收到了提醒。",
    note_label: "备注（必填）：你核实了什么",
    mark_sent: "标记为已发送",
    mark_failed: "标记为未发送",
    send_again: "重新发送",
    note_required: "备注为必填：请写明你核实了什么。",
    conflict: "任务 {task} 已被处理（现在是 {state}），你的操作未作任何更改。",
    resolved: "任务 {task}：{words}。",
    parked_since: "挂起于",
    task: "任务",
    user: "用户",
    notification: "通知",
    reference: "编号",
    attempts_spent: "尝试次数",

    col_no: "#",
    col_action: "动作",
    col_outcome: "结果",
    col_late: "迟到的结果",
    col_started: "开始",
    col_finished: "结束",
    col_detail: "详情／备注",

    log_title: "投递记录",
    log_intro: "按通知编号或任务编号查找，或按用户和事件键查找。只填用户则显示该用户的消息。",
    log_query: "通知编号或任务编号",
    log_user: "用户",
    log_event: "事件键",
    log_find: "查找",
    log_nothing: "没有匹配的记录。",
    notification_title: "通知",
    body: "内容",
    event_key: "事件键",
    created: "创建于",
    expires: "过期于",
    in_app_only: "仅站内",
    user_inbox_title: "用户的消息",
    erase_title: "删除此用户",
    erase_explain: "记录之后不再向此用户发送任何内容：所有尚未交给渠道的通知都会结束，其接收地址被销毁，之后为其提交的通知会被拒绝。\
                    已在进行中的调用不会被撤回。此操作无法撤销。",
    erase_confirm: "输入用户 ID 以确认",
    erase_button: "删除用户",
    erase_done: "该用户已删除：不会再向其发送任何内容。",
    erase_repeat: "该用户此前已删除；没有任何改变。",
    erase_mismatch: "输入的 ID 与此用户不符；未删除任何内容。",

    inbox_title: "我的消息",
    inbox_empty: "暂无消息。",
    unread: "未读",
    read: "已读",
    mark_read: "标为已读",

    channels_title: "我的渠道",
    channels_intro: "Herald 可以通过哪些渠道联系你。接收地址加密保存，不会再次显示——只显示是否已设置、是否已验证。",
    destination_label: "新的接收地址（留空则保留已保存的）",
    enabled_label: "启用",
    save: "保存",
    saved: "已保存。",
    dest_set: "已设置地址",
    dest_not_set: "未设置地址",
    verified: "已验证",
    not_verified: "未验证",
    on: "开",
    off: "关",
    send_test: "发送测试",
    test_accepted: "第三方已接受（{channel}）——你收到了吗？",
    i_received_it: "我已收到",
    test_refused: "{channel} 拒绝了：{why}。未作任何验证。",
    test_not_sent: "未发送：无法连接 {channel}。未作任何验证。",
    test_unknown: "{channel} 没有可读的应答（超时、连接中断或无法识别的应答）——无法确定你是否收到。不会自动重试。",
    test_too_soon: "{channel} 调用过于频繁：请 {secs} 秒后再试。",
    test_quota: "{channel} 的测试发送次数暂时用完：请 {secs} 秒后再试。",
    test_no_destination: "请先设置接收地址。",
    confirmed: "已验证：你确认收到了测试消息。",
    nothing_to_confirm: "没有发往当前地址且被接受的测试，无需确认。",
    need_destination: "启用该渠道需要先设置接收地址。",
    bad_destination: "该渠道无法使用这个接收地址（格式、长度或其指向的地址不符合要求），未作任何保存。",
    subscription_expired: "推送服务表示该浏览器订阅已失效：请在浏览器中重新订阅，再保存新的订阅。",

    st_accepted: "第三方已接受",
    st_sending: "发送中",
    st_pending: "等待发送",
    st_retry: "等待重试",
    st_refused: "未发送：被拒绝",
    st_expired: "未发送：已过期",
    st_off: "未发送：渠道已关闭",
    st_gone: "未发送：订阅已失效",
    st_unknown_checking: "结果未知——正在核实",
    st_unknown_review: "结果未知——等待人工处理",
    st_digest: "已合并到摘要",
    by_operator_sent: "已由运营人员标记为已发送",
    by_operator_failed: "已由运营人员标记为未发送",
    by_operator_resend: "已应运营人员要求重新发送",

    colon: "：",
    resolved_resend: "任务 {task}：已按运营人员要求重新排队发送。在工作进程取走之前不会发送；新的尝试会出现在它的时间线上。",
    what_happened: "发生了什么",
    log_event_alone: "事件键只在同一用户内唯一，单凭它无法确定一条通知：请同时填写用户，或按通知编号或任务编号查找。",
    open_notification: "打开通知",
    page_not_found: "控制台没有这个地址的页面。",
    age_now: "不到 1 分钟前",
    age_min: "{n} 分钟前",
    age_hour: "{h} 小时 {m} 分钟前",
    age_day: "{d} 天 {h} 小时前",
    chart_hour: "最近一小时（每分钟）",
    chart_day: "最近一天（每小时）",
    chart_desc: "第三方已接受 {accepted}，被拒绝或未发送 {refused}，结果未知 {unknown}，运营人员决定 {decided}；已挂起、仍在等待 {parked}。",
    chart_numbers: "图表背后的数字",
    chart_hour_ago: "60 分钟前",
    chart_day_ago: "24 小时前",
    chart_now: "现在",
    chart_axis: "尝试次数",
    chart_from: "起始",
    ch_accepted: "第三方已接受",
    ch_refused: "被拒绝或未发送",
    ch_unknown: "结果未知",
    ch_decided: "运营人员决定",
    ch_parked: "已挂起、仍在等待",
    test_result_label: "最近一次测试",
};

impl Words {
    /// The words of a human decision.
    #[must_use]
    pub fn decision(&self, final_state: FinalState) -> &'static str {
        match final_state {
            FinalState::Sent => self.by_operator_sent,
            FinalState::Failed => self.by_operator_failed,
            FinalState::Resend => self.by_operator_resend,
        }
    }

    /// A task state in words (the operator pages; the inbox has its own, finer words).
    #[must_use]
    pub fn state(&self, state: TaskState, parked: bool) -> &'static str {
        match state {
            TaskState::Pending => self.st_pending,
            TaskState::Sending => self.st_sending,
            TaskState::Sent => self.st_accepted,
            TaskState::Failed => self.st_refused,
            TaskState::Suppressed => self.st_off,
            TaskState::Unknown if parked => self.st_unknown_review,
            TaskState::Unknown => self.st_unknown_checking,
        }
    }

    #[must_use]
    pub fn contract(&self, capability: Capability) -> &'static str {
        match capability {
            Capability::Idempotent => self.contract_idempotent,
            Capability::Queryable { .. } => self.contract_queryable,
            Capability::Neither => self.contract_neither,
        }
    }

    #[must_use]
    pub fn check(&self, capability: Capability) -> &'static str {
        match capability {
            Capability::Idempotent => self.check_idempotent,
            Capability::Queryable { .. } => self.check_queryable,
            Capability::Neither => self.check_neither,
        }
    }

    /// An attempt's outcome in words, after its code.
    #[must_use]
    pub fn outcome(&self, outcome: Outcome) -> &'static str {
        let zh = std::ptr::eq(self, &ZH);
        match (outcome, zh) {
            (Outcome::Accepted, false) => "accepted by channel",
            (Outcome::Accepted, true) => "第三方已接受",
            (Outcome::AcceptedReplay, false) => "accepted before (same key): not sent again",
            (Outcome::AcceptedReplay, true) => "此前已接受（相同幂等键），未重复发送",
            (Outcome::QueryFound, false) => "the channel has it: accepted",
            (Outcome::QueryFound, true) => "渠道查到记录：第三方已接受",
            (Outcome::QueryNotFound, false) => "the channel has no record",
            (Outcome::QueryNotFound, true) => "渠道查无记录",
            (Outcome::Timeout, false) => "no answer in time: outcome unknown",
            (Outcome::Timeout, true) => "超时无应答：结果未知",
            (Outcome::IoError, false) => "no answer Herald could read (see the detail): outcome unknown",
            (Outcome::IoError, true) => "没有可读的应答（见详情）：结果未知",
            (Outcome::QueryFailed, false) => "the query failed",
            (Outcome::QueryFailed, true) => "查询失败",
            (Outcome::RetryableReject, false) => "refused before acceptance, may retry",
            (Outcome::RetryableReject, true) => "接受前被拒绝，可重试",
            (Outcome::Rejected, false) => "refused",
            (Outcome::Rejected, true) => "被拒绝",
            (Outcome::PrefDisabled, false) => "channel off: not sent",
            (Outcome::PrefDisabled, true) => "渠道已关闭：未发送",
            (Outcome::TtlExpired, false) => "expired: not sent",
            (Outcome::TtlExpired, true) => "已过期：未发送",
            (Outcome::PrefDisabledUncertain, false) => "channel off after an attempt that may have been accepted",
            (Outcome::PrefDisabledUncertain, true) => "可能已被接受的尝试之后渠道被关闭",
            (Outcome::TtlExpiredUncertain, false) => "expired after an attempt that may have been accepted",
            (Outcome::TtlExpiredUncertain, true) => "可能已被接受的尝试之后已过期",
            (Outcome::LeaseExpired, false) => "the worker vanished mid-call: outcome unknown",
            (Outcome::LeaseExpired, true) => "工作进程在调用中消失：结果未知",
            (Outcome::UserErased, false) => "user erased: nothing more is sent",
            (Outcome::UserErased, true) => "用户已删除：不再发送",
            (Outcome::ManualSent, _) => self.by_operator_sent,
            (Outcome::ManualFailed, _) => self.by_operator_failed,
            (Outcome::ManualResend, _) => self.by_operator_resend,
        }
    }

    /// Why a task was parked, from the reason the domain recorded (English in the store).
    #[must_use]
    pub fn park_reason<'a>(&self, reason: &'a str) -> &'a str {
        if !std::ptr::eq(self, &ZH) {
            return reason;
        }
        REASONS.iter().find(|(en, _)| *en == reason).map_or(reason, |(_, zh)| zh)
    }

    /// A detail the store keeps in English (an attempt's detail, the part of `last_error` before the
    /// reason), in this language: known phrases are translated, numbers, codes and a channel's own words
    /// kept as they are.
    #[must_use]
    pub fn detail(&self, text: &str) -> String {
        if !std::ptr::eq(self, &ZH) {
            return text.to_owned();
        }
        if let Some(zh) = REASONS.iter().find(|(en, _)| *en == text).map(|(_, zh)| *zh) {
            return zh.to_owned();
        }
        DETAIL_PHRASES.iter().fold(text.to_owned(), |out, (en, zh)| out.replace(en, zh))
    }

    /// How long ago `then` was, at `now`, in words.
    #[must_use]
    pub fn age(&self, now: herald_domain::Timestamp, then: herald_domain::Timestamp) -> String {
        let minutes = now.as_millis().saturating_sub(then.as_millis()).max(0) / 60_000;
        let (d, h, m) = ((minutes / 1440).to_string(), ((minutes / 60) % 24).to_string(), (minutes % 60).to_string());
        match minutes {
            0 => self.age_now.to_owned(),
            1..60 => fill(self.age_min, &[("n", &m)]),
            60..1440 => fill(self.age_hour, &[("h", &h), ("m", &m)]),
            _ => fill(self.age_day, &[("d", &d), ("h", &h)]),
        }
    }
}

/// The reasons the domain records for parking or closing a task, and their Chinese.
const REASONS: &[(&str, &str)] = &[
    ("channel switched off after an attempt that may have been accepted", "可能已被接受的尝试之后渠道被关闭"),
    ("expired after an attempt that may have been accepted", "可能已被接受的尝试之后通知已过期"),
    ("attempt budget exhausted while the outcome is unknown", "尝试次数已用完，结果仍未知"),
    (
        "outcome unknown and the channel offers neither idempotency key nor query",
        "结果未知，且渠道既无幂等键也不可查询",
    ),
    ("refused permanently after an attempt that may have been accepted", "在可能已被接受的尝试之后被永久拒绝"),
    ("refused, but an earlier attempt may have been accepted", "被拒绝，但更早的一次尝试可能已被接受"),
    ("refused permanently by the channel", "被渠道永久拒绝"),
    ("not accepted and attempt budget exhausted", "未被接受，尝试次数已用完"),
    ("attempt budget exhausted", "尝试次数已用完"),
    ("expired before it could be sent", "发送前已过期"),
    ("channel switched off", "渠道已关闭"),
    ("not found yet; asking again later", "暂未查到，稍后再查"),
    ("outcome unknown", "结果未知"),
];

/// English phrases of attempt details and their Chinese, longest first where one contains another.
const DETAIL_PHRASES: &[(&str, &str)] = &[
    ("connection broke after the request was sent", "请求发出后连接中断"),
    ("connection broke after the message was sent", "消息发出后连接中断"),
    ("timed out waiting for the channel", "等待渠道应答超时"),
    ("not sent: connection failed", "未发送：连接失败"),
    ("not sent: connection broke at ", "未发送：连接中断于 "),
    ("not sent: timed out at ", "未发送：超时于 "),
    (", before the message", "，在发送消息之前"),
    ("accepted (replay of the same key)", "第三方已接受（相同幂等键的重放）"),
    (" with an unrecognised text", "，应答文字无法识别"),
    (" with an unreadable body", "，应答内容无法读取"),
    (" on an SMTP channel", "（SMTP 渠道）"),
    (" at end of DATA", "（DATA 结束时）"),
    (": refused before acceptance", "：接受前被拒绝"),
    (": outcome unknown", "：结果未知"),
    ("outcome unknown", "结果未知"),
    (": refused", "：被拒绝"),
    ("refused: ", "被拒绝："),
    ("not sent: ", "未发送："),
];

/// A task's `last_error` (`"{detail}: {reason}"`, or a detail alone) split into what happened and why the
/// task stands as it does, so that a page says each once.
#[must_use]
pub fn split_last_error(last_error: &str) -> (Option<&str>, Option<&str>) {
    for (reason, _) in REASONS {
        if last_error == *reason {
            return (None, Some(reason));
        }
        if let Some(detail) = last_error.strip_suffix(reason).and_then(|d| d.strip_suffix(": ")) {
            return (Some(detail.strip_suffix(": outcome unknown").unwrap_or(detail)), Some(reason));
        }
    }
    (Some(last_error), None)
}

/// Replaces `{name}` placeholders.
#[must_use]
pub fn fill(template: &str, args: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in args {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_the_best_of_ours() {
        assert_eq!(Lang::from_accept_language("zh-CN,zh;q=0.9,en;q=0.8"), Lang::Zh);
        assert_eq!(Lang::from_accept_language("en-US,en;q=0.9,zh;q=0.8"), Lang::En);
        assert_eq!(Lang::from_accept_language("fr-FR, zh;q=0.5"), Lang::Zh);
        assert_eq!(Lang::from_accept_language("fr-FR"), Lang::En);
        assert_eq!(Lang::from_accept_language(""), Lang::En);
        assert_eq!(Lang::from_accept_language("en;q=0.2, zh-Hans;q=0.7"), Lang::Zh);
    }

    #[test]
    fn sent_is_accepted_by_channel_never_delivered() {
        assert_eq!(EN.st_accepted, "accepted by channel");
        assert_eq!(ZH.st_accepted, "第三方已接受");
        for words in [&EN, &ZH] {
            for outcome in Outcome::ALL {
                let text = words.outcome(outcome).to_lowercase();
                assert!(!text.contains("deliver") && !text.contains("送达"), "{text}");
            }
        }
        let all = format!("{:?}{:?}", debug_words(&EN), debug_words(&ZH));
        assert!(!all.to_lowercase().contains("delivered") && !all.contains("已送达"));
    }

    #[test]
    fn a_last_error_is_split_into_what_happened_and_why_each_said_once() {
        let stored = "HTTP 200 with an unrecognised text: outcome unknown: outcome unknown and the channel offers neither idempotency key nor query";
        let (detail, reason) = split_last_error(stored);
        assert_eq!(detail, Some("HTTP 200 with an unrecognised text"));
        assert_eq!(reason, Some("outcome unknown and the channel offers neither idempotency key nor query"));
        assert_eq!(
            split_last_error("connection broke after the request was sent"),
            (Some("connection broke after the request was sent"), None)
        );
        assert_eq!(split_last_error("attempt budget exhausted"), (None, Some("attempt budget exhausted")));
        assert_eq!(
            ZH.detail("HTTP 200 with an unrecognised text: outcome unknown"),
            "HTTP 200，应答文字无法识别：结果未知"
        );
        assert_eq!(ZH.detail("refused: 参数格式有误"), "被拒绝：参数格式有误");
        assert_eq!(EN.detail("HTTP 503: outcome unknown"), "HTTP 503: outcome unknown");
    }

    #[test]
    fn ages_read_in_minutes_hours_and_days() {
        use herald_domain::Timestamp;
        let at = |min: i64| Timestamp(min * 60_000 + 5_000);
        assert_eq!(EN.age(at(0), at(0)), "less than a minute ago");
        assert_eq!(EN.age(at(5), at(0)), "5 min ago");
        assert_eq!(EN.age(at(125), at(0)), "2 h 5 min ago");
        assert_eq!(ZH.age(at(3 * 1440 + 60), at(0)), "3 天 1 小时前");
        assert_eq!(EN.age(at(0), at(10)), "less than a minute ago", "a clock step back is not a negative age");
    }

    fn debug_words(w: &Words) -> Vec<&'static str> {
        vec![
            w.st_accepted,
            w.st_refused,
            w.test_accepted,
            w.test_unknown,
            w.contract_idempotent,
            w.contract_queryable,
            w.contract_neither,
            w.by_operator_sent,
            w.check_neither,
        ]
    }
}
