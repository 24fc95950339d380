//! `kind = "email"` (SPEC §9, §12): SMTP (RFC 5321), neither idempotent nor queryable by default.
//!
//! One connection per message, driven one step at a time with lettre's `AsyncSmtpConnection` — connect
//! (and implicit TLS), EHLO, `STARTTLS`, `AUTH`, `MAIL FROM`, `RCPT TO`, `DATA`, then the message and its
//! final `.` — each step under what is left of one deadline (`timeout_ms`), so the **stage** of every
//! failure is known. The adapter only reports the stage and what it saw there (a reply code, no reply
//! in time, a broken connection); [`classify_smtp`] decides what that proves. The line that matters: a
//! failure before the message was sent proves nothing was delivered (retry safe); no answer to the final
//! `.` leaves the outcome unknown (RFC 5321 §4.1.1.4), and unless the operator opted into
//! `on_unknown = "resend_same_message_id"` the task is parked for a human.
//!
//! While the message is being written the adapter cannot tell whether its last bytes left, so the whole
//! message step counts as "after the end of DATA": it errs towards unknown, as the HTTP kinds do.
//!
//! Every message carries `Message-ID: <ntf-{reference}@{domain of from}>`, the same for every attempt of a
//! task, so that a resend (by a human, or by the opt-in) never creates a second identity — a partial
//! guarantee: many receivers collapse equal Message-IDs, not all.
//!
//! The text is the privacy-safe one ([`crate::config::PRIVATE_DEFAULT_TEXT`] unless `text` is configured,
//! the body only with `send_body = true`); the subject is a fixed setting. lettre's `tracing` feature
//! stays off (it logs every command, and `RCPT TO` carries the destination), no reply text is ever put in
//! a detail, and no `lettre::Error` is formatted (its `Display` quotes the server's reply).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use herald_domain::classify::{classify_smtp, Classified, SmtpEvent, SmtpStage};
use herald_domain::{ChannelKind, Observation};
use herald_ports::OutboundMessage;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::ClientId;
use lettre::Address;
use secrecy::ExposeSecret;
use serde::Deserialize;
use tokio::time::{timeout_at, Instant};

use super::{ChannelBase, Kind, KindChannel};
use crate::config::{is_loopback, ChannelConfig, ConfigError, ConfigSecret, EMAIL_DEFAULT_SUBJECT, PRIVATE_DEFAULT_TEXT};
use crate::egress::Egress;

/// Longest accepted address (RFC 5321 §4.5.3.1: a path is at most 256 octets including the brackets).
pub const MAX_ADDRESS_LEN: usize = 254;

/// The keys of an `email` channel's `[[channel]]` table besides the shared ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// The SMTP server's host name or address.
    #[serde(default)]
    pub host: Option<String>,
    /// Absent means 587 for `starttls`, 465 for `implicit`, 25 for `none`.
    #[serde(default)]
    pub port: Option<u16>,
    /// `starttls` (default), `implicit`, or `none` (loopback hosts only).
    #[serde(default)]
    pub tls: Option<SmtpTls>,
    /// The AUTH user; needs `password` or `password_file`.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<ConfigSecret>,
    /// A file holding the password (one line; surrounding whitespace trimmed). Read when the channel is
    /// built; a configuration file's relative path is taken from that file's folder (`herald`'s loader
    /// makes it absolute, see [`Kind::files`]).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// A PEM file of certificate authorities trusted besides the web's roots (a private relay signed by
    /// an internal CA). Read when the channel is built; relative paths as for `password_file`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// The sender address (`MAIL FROM` and `From:`); its domain is the `Message-ID`'s right part.
    #[serde(default)]
    pub from: Option<String>,
    /// The subject; absent means [`EMAIL_DEFAULT_SUBJECT`]. A fixed text: never the body.
    #[serde(default)]
    pub subject: Option<String>,
    /// Send the notification body when no `text` is configured. Off by default: the channel gets
    /// [`PRIVATE_DEFAULT_TEXT`] unless the operator says otherwise.
    #[serde(default)]
    pub send_body: bool,
}

impl EmailSettings {
    /// The effective `tls`: the configured one, else `starttls`.
    #[must_use]
    pub fn tls(&self) -> SmtpTls {
        self.tls.unwrap_or(SmtpTls::Starttls)
    }

    /// The effective SMTP port: the configured one, else the usual one for [`EmailSettings::tls`].
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.tls() {
            SmtpTls::Starttls => 587,
            SmtpTls::Implicit => 465,
            SmtpTls::None => 25,
        })
    }
}

/// `tls = "…"` of an `email` channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain connect, then `STARTTLS` (required: a server that does not offer it is not used).
    Starttls,
    /// TLS from the first byte (SMTPS).
    Implicit,
    /// No TLS at all: allowed only for a loopback host (a local relay or a test server).
    None,
}

/// One configured e-mail channel.
pub type EmailChannel = KindChannel<Email>;

/// The e-mail kind's own part: the SMTP server, how to reach it, and the message's fixed parts.
pub struct Email {
    host: String,
    port: u16,
    tls: SmtpTls,
    /// Certificate authorities trusted besides the web's roots (`tls_ca_file`).
    roots: Vec<Certificate>,
    credentials: Option<Credentials>,
    from: Address,
    subject: String,
    timeout: Duration,
}

/// Checks an address given as a destination: one plain ASCII `local@domain` (no display name, no
/// angle brackets), at most [`MAX_ADDRESS_LEN`] characters, with a domain that has a dot.
///
/// # Errors
/// A short reason, never the address.
pub fn check_address(destination: &str) -> Result<Address, &'static str> {
    if destination.len() > MAX_ADDRESS_LEN {
        return Err("must be an e-mail address of at most 254 characters");
    }
    if !destination.is_ascii() || destination.trim() != destination {
        return Err("must be a plain ASCII e-mail address, such as user@example.org");
    }
    let address: Address = destination.parse().map_err(|_| "must be an e-mail address, such as user@example.org")?;
    if !address.domain().contains('.') && !address.domain().eq_ignore_ascii_case("localhost") {
        return Err("must be an e-mail address with a full domain, such as user@example.org");
    }
    Ok(address)
}

impl Email {
    /// Reads the password and the CA file of a checked entry, if any.
    fn read(entry: &ChannelConfig, config: &EmailSettings) -> Result<Self, ConfigError> {
        let name = entry.name.as_str();
        let host = config.host.clone().unwrap_or_default().trim().to_owned();
        let from: Address = config
            .from
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|_| ConfigError::new(name, "from", "is not an e-mail address"))?;
        let password = match (&config.password, &config.password_file) {
            (Some(password), _) => Some(password.expose().to_owned()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|_| ConfigError::new(name, "password_file", "cannot be read"))?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        let mut roots = Vec::new();
        if let Some(path) = &config.tls_ca_file {
            let pem = std::fs::read(path).map_err(|_| ConfigError::new(name, "tls_ca_file", "cannot be read"))?;
            let no_certificate = || ConfigError::new(name, "tls_ca_file", "holds no PEM certificate");
            if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                return Err(no_certificate());
            }
            roots.push(Certificate::from_pem(&pem).map_err(|_| no_certificate())?);
        }
        let credentials =
            config.username.clone().zip(password).map(|(user, password)| Credentials::new(user, password));
        Ok(Email {
            host,
            port: config.port(),
            tls: config.tls(),
            roots,
            credentials,
            from,
            subject: config.subject.clone().unwrap_or_else(|| EMAIL_DEFAULT_SUBJECT.to_owned()),
            timeout: Duration::from_millis(entry.timeout_ms),
        })
    }

    /// `<ntf-{reference}@{domain of from}>`: stable across every attempt of a task.
    fn message_id(&self, reference: &str) -> String {
        format!("<ntf-{reference}@{}>", self.from.domain())
    }

    /// The message as it goes on the wire (ASCII: lettre encodes a non-ASCII text or subject), every line
    /// ending CRLF ([`crlf_line_endings`]).
    fn format(&self, to: Address, message: &OutboundMessage) -> Result<Vec<u8>, Classified> {
        // The text's own line breaks, whatever they were, as LF (lettre turns LF into CRLF), so that lettre
        // chooses the body's encoding from the lines the reader will see.
        let text = message.text.replace("\r\n", "\n").replace('\r', "\n");
        let email = lettre::Message::builder()
            .from(Mailbox::new(None, self.from.clone()))
            .to(Mailbox::new(None, to))
            .subject(self.subject.as_str())
            .message_id(Some(self.message_id(&message.reference)))
            .header(ContentType::TEXT_PLAIN)
            .body(text)
            .map_err(|_| rejected("the message could not be built"))?;
        Ok(crlf_line_endings(&email.formatted()))
    }

    /// One send, step by step; `Err` is the classified end of a send that stopped early.
    async fn transaction(&self, to: Address, bytes: &[u8], deadline: Instant) -> Result<Classified, Classified> {
        let hello = ClientId::default();
        let implicit = match self.tls {
            SmtpTls::Implicit => Some(self.tls_parameters(SmtpStage::Connect)?),
            SmtpTls::Starttls | SmtpTls::None => None,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let connect = AsyncSmtpConnection::connect_tokio1(
            (self.host.as_str(), self.port),
            Some(remaining),
            &hello,
            implicit,
            None,
        );
        let mut connection = step(deadline, SmtpStage::Connect, connect).await?;
        let result = self.after_connect(&mut connection, &hello, to, bytes, deadline).await;
        match &result {
            // Politely, but never past the deadline and never changing the outcome.
            Ok(_) => {
                let _ = timeout_at(deadline, connection.quit()).await;
            }
            // After a failed STARTTLS handshake lettre holds no stream any more (writing to it would
            // panic in a debug build): the connection is only dropped, which closes it.
            Err(_) if self.tls == SmtpTls::Starttls && !connection.is_encrypted() => {}
            Err(_) => {
                let _ = timeout_at(deadline, connection.abort()).await;
            }
        }
        result
    }

    async fn after_connect(
        &self,
        connection: &mut AsyncSmtpConnection,
        hello: &ClientId,
        to: Address,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<Classified, Classified> {
        if self.tls == SmtpTls::Starttls {
            if !connection.can_starttls() {
                // Required, never skipped: falling back to plain text would send the address in the clear.
                return Err(classify_smtp(SmtpStage::StartTls, SmtpEvent::Broken));
            }
            let parameters = self.tls_parameters(SmtpStage::StartTls)?;
            step(deadline, SmtpStage::StartTls, connection.starttls(parameters, hello)).await?;
        }
        if let Some(credentials) = &self.credentials {
            step(deadline, SmtpStage::Auth, connection.auth(&[Mechanism::Plain, Mechanism::Login], credentials))
                .await?;
        }
        step(deadline, SmtpStage::Mail, connection.command(Mail::new(Some(self.from.clone()), vec![]))).await?;
        step(deadline, SmtpStage::Rcpt, connection.command(Rcpt::new(to, vec![]))).await?;
        step(deadline, SmtpStage::Data, connection.command(Data)).await?;
        let reply = step(deadline, SmtpStage::EndOfData, connection.message(bytes)).await?;
        let code = u16::from(reply.code());
        let text = reply.message().collect::<Vec<_>>().join(" ");
        Ok(classify_smtp(SmtpStage::EndOfData, SmtpEvent::Reply { code, text: &text }))
    }

    fn tls_parameters(&self, stage: SmtpStage) -> Result<TlsParameters, Classified> {
        let builder = self
            .roots
            .iter()
            .cloned()
            .fold(TlsParameters::builder(self.host.clone()), |b, root| b.add_root_certificate(root));
        builder.build().map_err(|_| classify_smtp(stage, SmtpEvent::Broken))
    }
}

/// `message` with every line ending CRLF: a bare CR or a bare LF anywhere (headers or body) becomes CRLF.
///
/// What goes into DATA must not hold a bare CR or LF (RFC 5321 §2.3.8): a relay that takes one for a line
/// end sees different lines than the next hop, and `<LF>.<CR><LF>` or `<CR>.<CR><LF>` in a body is then
/// the end of the message for one of them and text for the other — SMTP smuggling, a second message
/// under Herald's name. lettre turns a text's bare LF into CRLF but leaves a bare CR as it is, and its
/// dot-stuffing sees only CRLF line starts; after this pass every line start is one it sees.
fn crlf_line_endings(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + message.len() / 32);
    let mut bytes = message.iter().copied().peekable();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\r' => {
                bytes.next_if_eq(&b'\n');
                out.extend_from_slice(b"\r\n");
            }
            b'\n' => out.extend_from_slice(b"\r\n"),
            other => out.push(other),
        }
    }
    out
}

/// Runs one step under the deadline and says what it saw, for [`classify_smtp`].
async fn step<T>(
    deadline: Instant,
    stage: SmtpStage,
    future: impl Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Classified> {
    match timeout_at(deadline, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(classify_smtp(stage, event_of(&error))),
        Err(_) => Err(classify_smtp(stage, SmtpEvent::TimedOut)),
    }
}

/// What a lettre error shows: a reply code (its text is not kept), a timeout, or a broken exchange.
fn event_of(error: &lettre::transport::smtp::Error) -> SmtpEvent<'static> {
    match error.status() {
        Some(code) => SmtpEvent::Reply { code: u16::from(code), text: "" },
        None if error.is_timeout() => SmtpEvent::TimedOut,
        None => SmtpEvent::Broken,
    }
}

fn rejected(detail: &str) -> Classified {
    Classified { observation: Observation::Rejected, detail: detail.to_owned() }
}

#[async_trait]
impl Kind for Email {
    const KIND: ChannelKind = ChannelKind::Email;
    const ADAPTER: &'static str = "EmailChannel";
    const USES_URL: bool = false;
    type Settings = EmailSettings;

    fn files(settings: &mut EmailSettings) -> Vec<&mut PathBuf> {
        [&mut settings.password_file, &mut settings.tls_ca_file].into_iter().filter_map(Option::as_mut).collect()
    }

    fn default_text(settings: &EmailSettings) -> Option<&'static str> {
        (!settings.send_body).then_some(PRIVATE_DEFAULT_TEXT)
    }

    fn check_config(entry: &ChannelConfig, config: &EmailSettings) -> Result<(), ConfigError> {
        let err = |key: &str, reason: &str| Err(ConfigError::new(&entry.name, key, reason));
        let Some(host) = config.host.as_deref().filter(|host| !host.trim().is_empty()) else {
            return err("host", "is required for an email channel");
        };
        if config.port == Some(0) {
            return err("port", "must be between 1 and 65535");
        }
        if config.tls() == SmtpTls::None && !is_loopback(host) {
            return err("tls", "may be \"none\" only for a loopback host (localhost, 127.0.0.0/8, ::1)");
        }
        if config.tls() == SmtpTls::None && config.tls_ca_file.is_some() {
            return err("tls_ca_file", "is only used with tls = \"starttls\" or \"implicit\"");
        }
        if config.password.is_some() && config.password_file.is_some() {
            return err("password", "is given both directly and as password_file; give one");
        }
        let has_password = config.password.is_some() || config.password_file.is_some();
        if config.username.is_some() != has_password {
            return err("username", "and a password (password or password_file) go together");
        }
        match config.from.as_deref().map(str::parse::<lettre::Address>) {
            None => return err("from", "is required for an email channel"),
            Some(Err(_)) => return err("from", "is not an e-mail address"),
            Some(Ok(_)) => {}
        }
        if config.subject.as_deref().is_some_and(|s| s.trim().is_empty() || s.chars().any(char::is_control)) {
            return err("subject", "must be one non-empty line");
        }
        Ok(())
    }

    /// A password that is still a placeholder.
    fn check_production(
        entry: &ChannelConfig,
        config: &EmailSettings,
        placeholder: fn(&str) -> bool,
        _stand_ins: bool,
    ) -> Result<(), ConfigError> {
        if config.password.as_ref().is_some_and(|password| placeholder(password.expose())) {
            return Err(ConfigError::new(
                &entry.name,
                "password",
                "is a placeholder: give the SMTP server's real password (or password_file)",
            ));
        }
        Ok(())
    }

    /// Reads the password and the CA file, if any.
    fn build(entry: &ChannelConfig, config: &EmailSettings, _egress: &Egress) -> Result<Self, ConfigError> {
        Email::read(entry, config)
    }

    fn host(&self) -> &str {
        &self.host
    }

    /// One plain e-mail address ([`check_address`]).
    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        check_address(destination).map(drop)
    }

    async fn send(&self, _base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let deadline = Instant::now() + self.timeout;
        // Checked when stored; a stored value that is no address (an older row) can never be sent.
        let Ok(to) = check_address(message.destination.expose_secret()) else {
            return rejected("the stored destination is not an e-mail address");
        };
        let bytes = match self.format(to.clone(), message) {
            Ok(bytes) => bytes,
            Err(classified) => return classified,
        };
        match self.transaction(to, &bytes, deadline).await {
            Ok(classified) | Err(classified) => classified,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checked_without_repeating_them() {
        assert!(check_address("alice@example.org").is_ok());
        assert!(check_address("a.b+tag@mail.example.co.uk").is_ok());
        for bad in [
            "",
            "zqalice",
            "zqalice@",
            "@zq.example",
            "Zq <zq@zq.example>",
            " zq@zq.example",
            "ålice@zq.example",
            "zq@zqexample",
        ] {
            let err = check_address(bad).expect_err(bad);
            assert!(bad.is_empty() || !err.contains(bad), "{err}");
        }
        assert!(check_address(&format!("{}@example.org", "a".repeat(250))).is_err());
    }

    #[test]
    fn the_message_id_is_stable_and_names_the_senders_domain() {
        let config = ChannelConfig::with_settings::<Email>("mail", "", local_settings());
        let channel = EmailChannel::new(&config).expect("valid");
        assert_eq!(channel.kind().message_id("r-1"), "<ntf-r-1@notify.example.org>");
        let debug = format!("{channel:?}");
        assert!(debug.starts_with("EmailChannel"), "{debug}");
    }

    /// Settings of a server on loopback without TLS.
    fn local_settings() -> EmailSettings {
        EmailSettings {
            host: Some("127.0.0.1".into()),
            tls: Some(SmtpTls::None),
            from: Some("herald@notify.example.org".into()),
            ..EmailSettings::default()
        }
    }

    /// Whether every CR in `bytes` starts a CRLF and every LF ends one.
    fn only_crlf(bytes: &[u8]) -> bool {
        bytes.iter().enumerate().all(|(i, byte)| match byte {
            b'\r' => bytes.get(i + 1) == Some(&b'\n'),
            b'\n' => i > 0 && bytes[i - 1] == b'\r',
            _ => true,
        })
    }

    #[test]
    fn bare_cr_and_lf_become_crlf() {
        let cases: [(&[u8], &[u8]); 7] = [
            (b"a\rb", b"a\r\nb"),
            (b"a\nb", b"a\r\nb"),
            (b"a\r\nb", b"a\r\nb"),
            (b"a\r\r\nb", b"a\r\n\r\nb"),
            (b"a\n\rb", b"a\r\n\r\nb"),
            (b"\r.\r\n", b"\r\n.\r\n"),
            (b"end\r", b"end\r\n"),
        ];
        for (input, expected) in cases {
            assert_eq!(crlf_line_endings(input), expected, "{:?}", String::from_utf8_lossy(input));
        }
    }

    // Defect (issue 40): a bare CR in a body reached DATA unchanged (SMTP smuggling through relays that
    // take a bare CR for a line end).
    #[test]
    fn the_message_has_no_bare_cr_or_lf_whatever_the_text() {
        let config = ChannelConfig::with_settings::<Email>("mail", "", local_settings());
        let channel = EmailChannel::new(&config).expect("valid");
        for text in ["one\rtwo", "one\ntwo", "a\r.\r\nMAIL FROM:<x@y.example>\r\n", "\n.\r\n", "ü\rü\n", "x\r\r\n\n\r"]
        {
            let message = OutboundMessage {
                reference: "r-1".into(),
                idempotency_key: herald_domain::IdempotencyKey::for_task("r-1"),
                destination: secrecy::SecretString::from("alice@example.org"),
                text: text.into(),
                ttl_seconds: 60,
            };
            let to: Address = "alice@example.org".parse().expect("address");
            let bytes = channel.kind().format(to, &message).expect("formatted");
            assert!(only_crlf(&bytes), "{text:?}: {:?}", String::from_utf8_lossy(&bytes));
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_come_out_with_crlf_line_endings_only(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let out = crlf_line_endings(&input);
            proptest::prop_assert!(only_crlf(&out));
            // Nothing but line endings changes: without CR and LF both are the same bytes.
            let strip = |b: &[u8]| b.iter().copied().filter(|c| *c != b'\r' && *c != b'\n').collect::<Vec<_>>();
            proptest::prop_assert_eq!(strip(&out), strip(&input));
        }
    }
}
