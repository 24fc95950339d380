//! The SMTP server stand-in (RFC 5321): a small in-process server on tokio that speaks EHLO/HELO, MAIL,
//! RCPT, DATA and the message up to its final `.`, RSET, NOOP and QUIT, records every message it takes,
//! and answers as scripted.
//!
//! The line of RFC 5321 that matters is where the server becomes responsible: a 2yz reply to the final
//! `.`. So the central rule of the stand-ins holds at that line — a step that takes the message
//! ([`SmtpScript::Accept`], [`SmtpScript::Delay`], [`SmtpScript::Hang`], [`SmtpScript::Garbage`],
//! [`SmtpScript::Drop`] at [`SmtpStage::EndOfData`]) records it **when the final `.` arrives**, before it
//! delays, hangs, drops the connection or answers garbage; a refusal ([`SmtpScript::Reply`]) is answered
//! before anything is recorded, at whatever stage it is scripted for. A message is a *real send*: it
//! would have reached the mailbox.
//!
//! Steps are consumed one per mail transaction: at `MAIL FROM` from the shared queue (else a chaos draw,
//! else `Accept`), unless the first recipient has a step queued for it ([`SmtpStandIn::script_for`]),
//! which then replaces it from `RCPT TO` on (a shared step it replaces goes back to the front of its
//! queue). The message's `Message-ID` names the task (`<ntf-{reference}@…>`, the e-mail adapter's), so
//! real sends are counted per reference and per recipient.
//!
//! Clients are local and trusted (tests, the soak, the demo): lines are not length-limited beyond a
//! message cap, and nothing here logs — recipients are destinations (§8).

use std::collections::{HashMap, VecDeque};
use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::chaos::{Chaos, ChaosState};
use super::script::Script;

/// The largest message the stand-in takes (`552` beyond it).
const MAX_MESSAGE: usize = 10 * 1024 * 1024;

/// Where in a mail transaction a scripted reply or drop happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpStage {
    /// The reply to `MAIL FROM`.
    Mail,
    /// The reply to the first `RCPT TO`.
    Rcpt,
    /// The reply to `DATA` (instead of its `354`).
    Data,
    /// The reply to the message's final `.`: the one that makes the server responsible.
    EndOfData,
}

/// What the stand-in does with one mail transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpScript {
    /// Take the message and answer `250 … queued as Q{n}` at once.
    Accept,
    /// Refuse with this 4yz or 5yz code at this stage; nothing is recorded (at `EndOfData` the server
    /// refuses the message it was given, so it must not deliver it).
    Reply {
        /// Where the refusal is answered.
        at: SmtpStage,
        /// A 4yz or 5yz code; checked when scripted.
        code: u16,
    },
    /// Close the connection without a reply at this stage. At `EndOfData` the message is recorded
    /// first: the server took it, and its reply never came.
    Drop {
        /// Where the connection is closed.
        at: SmtpStage,
    },
    /// Take the message, wait this long, then answer `250`: a client with a shorter timeout sees no
    /// reply to its final `.`.
    Delay(Duration),
    /// Take the message and never answer; the connection is held until the stand-in shuts down.
    Hang,
    /// Take the message, then answer a line that is no SMTP reply.
    Garbage,
}

impl SmtpScript {
    /// The SMTP meaning of a chaos draw (which speaks HTTP): 503 is a `451` to the final `.` (refused
    /// after the message was sent: the server must not deliver), 429 a `421` to `MAIL`, 410 a `550` to
    /// `RCPT` (no such mailbox), any other status a `451` to `RCPT`; a drop before acceptance closes at
    /// `RCPT`, one after it at the final `.`.
    fn from_draw(step: &Script) -> SmtpScript {
        match step {
            Script::Ok | Script::QueryStatus(_) => SmtpScript::Accept,
            Script::Delay(d) => SmtpScript::Delay(*d),
            Script::HangAfterAccept => SmtpScript::Hang,
            Script::Status { code: 503, .. } => SmtpScript::Reply { at: SmtpStage::EndOfData, code: 451 },
            Script::Status { code: 429, .. } => SmtpScript::Reply { at: SmtpStage::Mail, code: 421 },
            Script::Status { code: 410, .. } => SmtpScript::Reply { at: SmtpStage::Rcpt, code: 550 },
            Script::Status { .. } => SmtpScript::Reply { at: SmtpStage::Rcpt, code: 451 },
            Script::DropBeforeAccept => SmtpScript::Drop { at: SmtpStage::Rcpt },
            Script::DropAfterAccept => SmtpScript::Drop { at: SmtpStage::EndOfData },
            Script::Garbage => SmtpScript::Garbage,
        }
    }

    /// # Panics
    /// On a reply code outside 400..=599: a typo in a test fails where it was written.
    fn checked(self) -> SmtpScript {
        if let SmtpScript::Reply { code, .. } = self {
            assert!((400..=599).contains(&code), "scripted SMTP reply {code} is not a 4yz or 5yz refusal");
        }
        self
    }

    /// Whether this step takes the message when its final `.` arrives.
    fn takes_message(self) -> bool {
        match self {
            SmtpScript::Accept | SmtpScript::Delay(_) | SmtpScript::Hang | SmtpScript::Garbage => true,
            SmtpScript::Drop { at } => at == SmtpStage::EndOfData,
            SmtpScript::Reply { .. } => false,
        }
    }
}

/// One message the stand-in took.
///
/// `Debug` redacts the recipients: they are destinations (§8).
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpMessage {
    /// The queue id given (or that would have been given) in the `250` reply.
    pub queue_id: String,
    /// The envelope sender (`MAIL FROM`).
    pub mail_from: String,
    /// The envelope recipients (`RCPT TO`).
    pub rcpt: Vec<String>,
    /// The message as received (headers and body, dot-stuffing undone).
    pub data: String,
    /// Its `Message-ID` header, angle brackets included.
    pub message_id: Option<String>,
    /// When its final `.` arrived.
    pub at: Instant,
}

impl std::fmt::Debug for SmtpMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpMessage")
            .field("queue_id", &self.queue_id)
            .field("rcpt", &"<redacted>")
            .field("message_id", &self.message_id)
            .finish_non_exhaustive()
    }
}

impl SmtpMessage {
    /// The value of the first header `name` (case-insensitive), unfolded.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<String> {
        message_header(&self.data, name)
    }

    /// The body (after the blank line).
    #[must_use]
    pub fn body(&self) -> &str {
        message_body(&self.data)
    }

    /// The task reference of the Message-ID `<ntf-{reference}@…>`, when it has that form.
    #[must_use]
    pub fn reference(&self) -> Option<&str> {
        let id = self.message_id.as_deref()?.strip_prefix("<ntf-")?;
        Some(&id[..id.rfind('@')?])
    }
}

#[derive(Default)]
struct Inner {
    global: VecDeque<SmtpScript>,
    keyed: HashMap<String, VecDeque<SmtpScript>>,
    chaos: Option<ChaosState>,
    connections: u64,
    transactions: u64,
    messages: Vec<SmtpMessage>,
}

impl Inner {
    /// The step of a new transaction, and whether it came from the shared queue.
    fn next_at_mail(&mut self) -> (SmtpScript, bool) {
        if let Some(step) = self.global.pop_front() {
            return (step, true);
        }
        let drawn = self.chaos.as_mut().map(|chaos| SmtpScript::from_draw(&chaos.next_send()));
        (drawn.unwrap_or(SmtpScript::Accept), false)
    }

    fn keyed_for(&mut self, rcpt: &str) -> Option<SmtpScript> {
        let queue = self.keyed.get_mut(rcpt)?;
        let step = queue.pop_front();
        if queue.is_empty() {
            self.keyed.remove(rcpt);
        }
        step
    }
}

struct Shared(Mutex<Inner>);

impl Shared {
    /// A panicking test must not turn every later read into a second panic: the state is plain records.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running SMTP stand-in on loopback. Dropping it stops the server; [`SmtpStandIn::shutdown`] also
/// waits until every connection, hung ones included, is closed.
pub struct SmtpStandIn {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

impl std::fmt::Debug for SmtpStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpStandIn").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl SmtpStandIn {
    /// Starts the stand-in on `127.0.0.1` and an ephemeral port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> io::Result<SmtpStandIn> {
        Self::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the stand-in on a chosen address.
    ///
    /// # Errors
    /// When binding `addr` fails.
    pub async fn bind(addr: SocketAddr) -> io::Result<SmtpStandIn> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared(Mutex::default()));
        let (stop, stopped) = oneshot::channel();
        let server = tokio::spawn(serve(listener, Arc::clone(&shared), stopped));
        Ok(SmtpStandIn { shared, addr, stop, server })
    }

    /// Stops accepting, closes every open connection and waits for the server to finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }

    /// The bound socket address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound port, for a channel's `port`.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Queues a step for the next mail transaction.
    ///
    /// # Panics
    /// On a [`SmtpScript::Reply`] whose code is not 4yz or 5yz.
    pub fn script(&self, step: SmtpScript) {
        self.shared.lock().global.push_back(step.checked());
    }

    /// Queues a step for the next transaction whose first recipient is `rcpt`; it wins over the shared
    /// queue (from `RCPT TO` on, so a step for a recipient cannot be at [`SmtpStage::Mail`]: it is
    /// answered at `RCPT` instead).
    ///
    /// # Panics
    /// On a [`SmtpScript::Reply`] whose code is not 4yz or 5yz.
    pub fn script_for(&self, rcpt: &str, step: SmtpScript) {
        self.shared.lock().keyed.entry(rcpt.to_owned()).or_default().push_back(step.checked());
    }

    /// Chaos mode (`Some`): a transaction that finds no step queued draws one from the weights of
    /// [`Chaos`], read as SMTP (see [`SmtpScript`]'s mapping: refusals at MAIL, RCPT and after the final
    /// `.`, drops before and after it, late and garbage replies).
    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        self.shared.lock().chaos = chaos.map(ChaosState::new);
    }

    /// How often each chaos behaviour was drawn, by the names of [`DRAW_NAMES`](crate::DRAW_NAMES).
    #[must_use]
    pub fn chaos_draws(&self) -> Vec<(&'static str, u64)> {
        self.shared.lock().chaos.as_ref().map(ChaosState::draws).unwrap_or_default()
    }

    /// Connections accepted.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.shared.lock().connections
    }

    /// Mail transactions begun (`MAIL FROM` commands), whatever their end.
    #[must_use]
    pub fn transactions(&self) -> u64 {
        self.shared.lock().transactions
    }

    /// Messages taken: real sends.
    #[must_use]
    pub fn sends(&self) -> u64 {
        self.shared.lock().messages.len() as u64
    }

    /// Messages taken whose Message-ID names this task reference.
    #[must_use]
    pub fn sends_for(&self, reference: &str) -> u64 {
        self.shared.lock().messages.iter().filter(|m| m.reference() == Some(reference)).count() as u64
    }

    /// Messages taken for this recipient.
    #[must_use]
    pub fn sends_to(&self, rcpt: &str) -> u64 {
        self.shared.lock().messages.iter().filter(|m| m.rcpt.iter().any(|r| r == rcpt)).count() as u64
    }

    /// Every message taken, in order.
    #[must_use]
    pub fn messages(&self) -> Vec<SmtpMessage> {
        self.shared.lock().messages.clone()
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    shared.lock().connections += 1;
                    let shared = Arc::clone(&shared);
                    connections.spawn(async move {
                        // A client that vanished mid-session is the client's business.
                        let _ = session(stream, &shared).await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// An open mail transaction.
struct Transaction {
    mail_from: String,
    rcpt: Vec<String>,
    step: SmtpScript,
    from_global: bool,
}

/// How a command ended the session, if it did.
enum Next {
    Continue,
    Close,
}

/// The address inside `<…>` after `prefix` (`FROM:`, `TO:`), case-insensitive; parameters ignored.
fn path_of(argument: &str, prefix: &str) -> Option<String> {
    let rest =
        argument.get(..prefix.len()).filter(|p| p.eq_ignore_ascii_case(prefix)).map(|_| &argument[prefix.len()..])?;
    let rest = rest.trim_start();
    let inner = rest.strip_prefix('<')?;
    Some(inner[..inner.find('>')?].to_owned())
}

async fn session(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut stream = BufReader::new(stream);
    stream.get_mut().write_all(b"220 herald-standin ESMTP ready\r\n").await?;
    let mut transaction: Option<Transaction> = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        if stream.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let command = text.trim_end_matches(['\r', '\n']);
        let (verb, argument) = command.split_once(' ').unwrap_or((command, ""));
        let next = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => reply(&mut stream, "250-herald-standin\r\n250-8BITMIME\r\n250 SIZE 10485760").await?,
            "HELO" => reply(&mut stream, "250 herald-standin").await?,
            "NOOP" => reply(&mut stream, "250 2.0.0 OK").await?,
            "RSET" => {
                transaction = None;
                reply(&mut stream, "250 2.0.0 OK").await?
            }
            "QUIT" => {
                reply(&mut stream, "221 2.0.0 Bye").await?;
                Next::Close
            }
            "MAIL" => mail(&mut stream, shared, &mut transaction, argument).await?,
            "RCPT" => rcpt(&mut stream, shared, &mut transaction, argument).await?,
            "DATA" => data(&mut stream, shared, &mut transaction).await?,
            "STARTTLS" => reply(&mut stream, "454 4.7.0 TLS not available").await?,
            _ => reply(&mut stream, "500 5.5.2 command not recognized").await?,
        };
        if let Next::Close = next {
            return Ok(());
        }
    }
}

async fn reply(stream: &mut BufReader<TcpStream>, text: &str) -> io::Result<Next> {
    stream.get_mut().write_all(format!("{text}\r\n").as_bytes()).await?;
    Ok(Next::Continue)
}

async fn refuse(stream: &mut BufReader<TcpStream>, code: u16) -> io::Result<Next> {
    let class = if code >= 500 { 5 } else { 4 };
    reply(stream, &format!("{code} {class}.0.0 scripted refusal")).await
}

async fn mail(
    stream: &mut BufReader<TcpStream>,
    shared: &Shared,
    transaction: &mut Option<Transaction>,
    argument: &str,
) -> io::Result<Next> {
    if transaction.is_some() {
        return reply(stream, "503 5.5.1 nested MAIL command").await;
    }
    let Some(mail_from) = path_of(argument, "FROM:") else {
        return reply(stream, "501 5.5.4 syntax: MAIL FROM:<address>").await;
    };
    let (step, from_global) = {
        let mut inner = shared.lock();
        inner.transactions += 1;
        inner.next_at_mail()
    };
    match step {
        SmtpScript::Reply { at: SmtpStage::Mail, code } => refuse(stream, code).await,
        SmtpScript::Drop { at: SmtpStage::Mail } => Ok(Next::Close),
        _ => {
            *transaction = Some(Transaction { mail_from, rcpt: Vec::new(), step, from_global });
            reply(stream, "250 2.1.0 OK").await
        }
    }
}

async fn rcpt(
    stream: &mut BufReader<TcpStream>,
    shared: &Shared,
    transaction: &mut Option<Transaction>,
    argument: &str,
) -> io::Result<Next> {
    let Some(tx) = transaction.as_mut() else {
        return reply(stream, "503 5.5.1 need MAIL before RCPT").await;
    };
    let Some(address) = path_of(argument, "TO:") else {
        return reply(stream, "501 5.5.4 syntax: RCPT TO:<address>").await;
    };
    if tx.rcpt.is_empty() {
        let mut inner = shared.lock();
        if let Some(step) = inner.keyed_for(&address) {
            if tx.from_global {
                inner.global.push_front(tx.step);
            }
            tx.step = step;
            tx.from_global = false;
        }
    }
    match tx.step {
        // A step for a recipient cannot reach back to MAIL: it is answered here.
        SmtpScript::Reply { at: SmtpStage::Rcpt | SmtpStage::Mail, code } => refuse(stream, code).await,
        SmtpScript::Drop { at: SmtpStage::Rcpt | SmtpStage::Mail } => Ok(Next::Close),
        _ => {
            tx.rcpt.push(address);
            reply(stream, "250 2.1.5 OK").await
        }
    }
}

async fn data(
    stream: &mut BufReader<TcpStream>,
    shared: &Shared,
    transaction: &mut Option<Transaction>,
) -> io::Result<Next> {
    let Some(tx) = transaction.take_if(|tx| !tx.rcpt.is_empty()) else {
        return reply(stream, "503 5.5.1 need RCPT before DATA").await;
    };
    match tx.step {
        SmtpScript::Reply { at: SmtpStage::Data, code } => return refuse(stream, code).await,
        SmtpScript::Drop { at: SmtpStage::Data } => return Ok(Next::Close),
        _ => {}
    }
    reply(stream, "354 End data with <CR><LF>.<CR><LF>").await?;
    let mut message = Vec::new();
    let mut line = Vec::new();
    let mut too_large = false;
    loop {
        line.clear();
        if stream.read_until(b'\n', &mut line).await? == 0 {
            // The client went away before its final `.`: nothing was taken.
            return Ok(Next::Close);
        }
        if line == b".\r\n" || line == b".\n" {
            break;
        }
        let unstuffed = if line.starts_with(b"..") { &line[1..] } else { &line[..] };
        if message.len() + unstuffed.len() > MAX_MESSAGE {
            too_large = true;
        } else {
            message.extend_from_slice(unstuffed);
        }
    }
    if too_large {
        return reply(stream, "552 5.3.4 message too big").await;
    }
    if !tx.step.takes_message() {
        return match tx.step {
            SmtpScript::Reply { code, .. } => refuse(stream, code).await,
            _ => Ok(Next::Close),
        };
    }
    let queue_id = {
        let mut inner = shared.lock();
        let queue_id = format!("Q{}", inner.messages.len() + 1);
        let mut taken = SmtpMessage {
            queue_id: queue_id.clone(),
            mail_from: tx.mail_from,
            rcpt: tx.rcpt,
            data: String::from_utf8_lossy(&message).into_owned(),
            message_id: None,
            at: Instant::now(),
        };
        taken.message_id = taken.header("message-id");
        inner.messages.push(taken);
        queue_id
    };
    let accepted = format!("250 2.0.0 Ok: queued as {queue_id}");
    match tx.step {
        SmtpScript::Delay(delay) => {
            tokio::time::sleep(delay).await;
            reply(stream, &accepted).await
        }
        SmtpScript::Hang => pending().await,
        SmtpScript::Drop { .. } => Ok(Next::Close),
        SmtpScript::Garbage => reply(stream, "OK, got it").await,
        _ => reply(stream, &accepted).await,
    }
}

/// The value of the first header `name` (case-insensitive, folded lines joined) of an RFC 5322 message.
#[must_use]
pub fn message_header(data: &str, name: &str) -> Option<String> {
    let head = data.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.split("\r\n").peekable();
    while let Some(line) = lines.next() {
        let Some((key, value)) = line.split_once(':') else { continue };
        if key.eq_ignore_ascii_case(name) {
            let mut value = value.trim().to_owned();
            while let Some(next) = lines.peek().filter(|l| l.starts_with([' ', '\t'])) {
                value.push(' ');
                value.push_str(next.trim());
                lines.next();
            }
            return Some(value);
        }
    }
    None
}

/// The body of an RFC 5322 message (after the blank line).
#[must_use]
pub fn message_body(data: &str) -> &str {
    data.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}
