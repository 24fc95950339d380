//! The egress guard (SPEC §16): the one place every destination a user controls goes through before
//! Herald connects to it — a Web Push subscription's endpoint today, a per-user webhook URL if one is ever
//! added. Operators' own channel URLs do not: they are configuration, not user input.
//!
//! A user who may set a destination must not be able to aim Herald at the machine it runs on or at the
//! network behind it (server-side request forgery). So, as Svix and Stripe's smokescreen do:
//!
//! * **Every address is classified** ([`classify`]) and refused when it is loopback, unspecified,
//!   private (RFC 1918, RFC 4193 `fc00::/7`, site-local `fec0::/10`, local-use NAT64 `64:ff9b:1::/48`),
//!   shared (CGNAT, `100.64.0.0/10`), link-local (`169.254.0.0/16` — the cloud metadata service —,
//!   `fe80::/10`), multicast, broadcast, documentation (`192.0.2.0/24`, `198.51.100.0/24`,
//!   `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`) or otherwise reserved (`0.0.0.0/8`,
//!   `192.0.0.0/24`, `198.18.0.0/15`, `240.0.0.0/4`, IPv6 outside `2000::/3`, …). An IPv6 address that
//!   carries an IPv4 address — mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, translated
//!   `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo `2001::/32` — is judged by the
//!   IPv4 address it carries, so `[::ffff:127.0.0.1]` is loopback.
//! * **Every spelling is one address.** Hosts are read by the URL parser (WHATWG rules), which turns
//!   `127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`, `127.0.0.1.` and upper case into the one
//!   address they name before anything here looks at them. `localhost` and `*.localhost` (RFC 6761) are
//!   loopback by name, trailing dot or not.
//! * **The connection goes to the address that was checked.** A name is resolved once, by
//!   [`GuardedResolver`], which is the HTTP client's resolver: it checks every address the lookup
//!   returned and hands the client exactly those, so a resolver that answers differently the second time
//!   (DNS rebinding) gets no second time. A literal address never reaches a resolver (the client connects
//!   to it directly), so [`Guard::check_url`] checks it before the request is built. Redirects are never
//!   followed and no proxy is used (`crate::http`), so nothing else picks an address.
//! * **When.** When a destination is stored ([`Guard::check_url`] through `Channel::check_destination`:
//!   literal addresses and `localhost`, no lookup) and again at every send (literal addresses before the
//!   request, names in the resolver). A refused send made no request, so it is REJECTED
//!   ([`herald_domain::classify::egress_refused`]).
//! * **Exceptions.** `[egress] allow_private` lists the ranges an installation's own push service lives
//!   in ([`Egress::new`]); it lifts every refusal but loopback, unspecified, multicast and broadcast.
//!   Loopback is allowed only by a channel's `allow_loopback_endpoints` ([`Egress::guard`]), for local
//!   stand-ins; `herald serve` and `herald worker` refuse it outside `--stand-ins`.
//!
//! Refusals name the kind of address ([`Refused::reason`]), never the address or the host.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// What kind of address a refused one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forbidden {
    /// `127.0.0.0/8`, `::1`: this machine.
    Loopback,
    /// `0.0.0.0/8`, `::`: "this host" or "this network" (a connection to `0.0.0.0` reaches this machine).
    Unspecified,
    /// RFC 1918, RFC 4193 unique local `fc00::/7`, deprecated site-local `fec0::/10`, local-use NAT64.
    Private,
    /// `100.64.0.0/10` (RFC 6598): a carrier's NAT, not the internet.
    SharedAddressSpace,
    /// `169.254.0.0/16` (cloud metadata services live here), `fe80::/10`.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// RFC 5737, RFC 3849 and RFC 9637 documentation ranges.
    Documentation,
    /// Special-purpose or unassigned space: benchmarking `198.18.0.0/15`, `240.0.0.0/4`, `192.0.0.0/24`,
    /// IPv6 outside global unicast, deprecated forms.
    Reserved,
}

impl Forbidden {
    /// Whether `[egress] allow_private` may lift this refusal. Never for loopback and unspecified (this
    /// machine: only a channel's `allow_loopback_endpoints` opens it, for stand-ins), multicast and
    /// broadcast (not one host).
    #[must_use]
    pub fn liftable(self) -> bool {
        !matches!(self, Forbidden::Loopback | Forbidden::Unspecified | Forbidden::Multicast | Forbidden::Broadcast)
    }
}

/// What an address is: `None` for a public unicast address Herald may connect to, else why not.
#[must_use]
pub fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Forbidden> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => Forbidden::Unspecified,
        (127, _, _) => Forbidden::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Forbidden::Private,
        (100, 64..=127, _) => Forbidden::SharedAddressSpace,
        (169, 254, _) => Forbidden::LinkLocal,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Forbidden::Documentation,
        // IETF protocol assignments (DS-Lite, NAT64 discovery …), the deprecated 6to4 relay anycast,
        // benchmarking.
        (192, 0, 0) | (192, 88, 99) | (198, 18..=19, _) => Forbidden::Reserved,
        (224..=239, _, _) => Forbidden::Multicast,
        _ if ip.is_broadcast() => Forbidden::Broadcast,
        (240..=255, _, _) => Forbidden::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip.is_unspecified() {
        return Some(Forbidden::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Forbidden::Loopback);
    }
    match s {
        // IPv4-mapped (`::ffff:a.b.c.d`): the connection is made over IPv4 to the address it carries.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => classify_v4(v4(hi, lo)),
        // IPv4-compatible (`::a.b.c.d`, deprecated) and IPv4-translated (`::ffff:0:a.b.c.d`, SIIT): judged by
        // the address they carry, and reserved even when that one is public — nothing legitimate uses them.
        [0, 0, 0, 0, 0, 0, hi, lo] | [0, 0, 0, 0, 0xffff, 0, hi, lo] => {
            classify_v4(v4(hi, lo)).or(Some(Forbidden::Reserved))
        }
        // NAT64 (RFC 6052 well-known prefix): a translator connects to the IPv4 address it carries.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => classify_v4(v4(hi, lo)),
        // Local-use NAT64 (RFC 8215): a translator of the local network.
        [0x64, 0xff9b, 1, ..] => Some(Forbidden::Private),
        // Discard-only (RFC 6666).
        [0x100, 0, 0, 0, ..] => Some(Forbidden::Reserved),
        // 6to4 (RFC 3056): the IPv4 address of the site's relay follows the prefix.
        [0x2002, hi, lo, ..] => classify_v4(v4(hi, lo)),
        // Teredo (RFC 4380): the server's IPv4 address, and the client's, inverted, at the end.
        [0x2001, 0, server_hi, server_lo, _, _, client_hi, client_lo] => {
            classify_v4(v4(server_hi, server_lo)).or_else(|| classify_v4(v4(!client_hi, !client_lo)))
        }
        [0x2001, 0xdb8, ..] => Some(Forbidden::Documentation),
        [0x3fff, second, ..] if second < 0x1000 => Some(Forbidden::Documentation),
        // Benchmarking (RFC 5180) and ORCHID (RFC 7343).
        [0x2001, 2, 0, ..] => Some(Forbidden::Reserved),
        [0x2001, second, ..] if (0x10..=0x2f).contains(&second) => Some(Forbidden::Reserved),
        [first, ..] if first & 0xfe00 == 0xfc00 => Some(Forbidden::Private),
        [first, ..] if first & 0xffc0 == 0xfe80 => Some(Forbidden::LinkLocal),
        [first, ..] if first & 0xffc0 == 0xfec0 => Some(Forbidden::Private),
        [first, ..] if first & 0xff00 == 0xff00 => Some(Forbidden::Multicast),
        // Global unicast is `2000::/3`; the rest of the space is unassigned or special.
        [first, ..] if first & 0xe000 != 0x2000 => Some(Forbidden::Reserved),
        _ => None,
    }
}

/// An address range, `10.1.2.0/24` or `fd00::/8` (a bare address is one host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// The ranges no allowlist may overlap: what [`Forbidden::liftable`] never lifts, also in mapped form.
const NEVER_ALLOWED: [(Cidr, &str); 10] = [
    (Cidr::v4([0, 0, 0, 0], 8), "unspecified"),
    (Cidr::v4([127, 0, 0, 0], 8), "loopback"),
    (Cidr::v4([224, 0, 0, 0], 4), "multicast"),
    (Cidr::v4([255, 255, 255, 255], 32), "broadcast"),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
    (Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 104), "unspecified"),
    (Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0x7f00, 0], 104), "loopback"),
    (Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0xe000, 0], 100), "multicast"),
];

impl Cidr {
    const fn v4(octets: [u8; 4], prefix: u8) -> Cidr {
        Cidr { network: IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3])), prefix }
    }

    const fn v6(s: [u16; 8], prefix: u8) -> Cidr {
        Cidr { network: IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])), prefix }
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address also counts as the IPv4 address it is.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.contains_as_written(ip) || self.contains_as_written(ip.to_canonical())
    }

    fn contains_as_written(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(network) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(network) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    /// What an allowlist entry may not be: a range reaching this machine, multicast or broadcast.
    ///
    /// # Errors
    /// The fixed range it overlaps, in words.
    pub fn check_allowable(&self) -> Result<(), String> {
        for (never, what) in NEVER_ALLOWED {
            if self.contains_as_written(never.network) || never.contains_as_written(self.network) {
                return Err(format!(
                    "overlaps {never} ({what}), which no allowlist opens (loopback only a channel's \
                     allow_loopback_endpoints does, for a local stand-in)"
                ));
            }
        }
        Ok(())
    }
}

impl FromStr for Cidr {
    type Err = &'static str;

    fn from_str(text: &str) -> Result<Cidr, &'static str> {
        const FORM: &str = "must be an address range such as 10.1.2.0/24 or fd00::/8";
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| FORM)?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) if prefix.bytes().all(|b| b.is_ascii_digit()) && !prefix.is_empty() => {
                prefix.parse::<u8>().ok().filter(|p| *p <= bits).ok_or(FORM)?
            }
            Some(_) => return Err(FORM),
        };
        let cidr = Cidr { network, prefix };
        // `10.1.2.5/24` is most likely a typo for a host or for `10.1.2.0/24`: say so rather than guess.
        let masked = match network {
            IpAddr::V4(v4) => {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)))
            }
            IpAddr::V6(v6) => {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)))
            }
        };
        if masked != network {
            return Err("has address bits set beyond its prefix length (write the range's first address)");
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Why the guard refused a destination: what kind of address it is, or resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused(pub Forbidden);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// For the user who set the destination and for the attempt's detail: the kind of address, never the
    /// address or the host.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        macro_rules! reason {
            ($what:literal) => {
                concat!("the endpoint's host is (or resolves to) ", $what, "; Herald sends only to public addresses")
            };
        }
        match self.0 {
            Forbidden::Loopback => reason!("a loopback address"),
            Forbidden::Unspecified => reason!("an unspecified address"),
            Forbidden::Private => reason!("a private address"),
            Forbidden::SharedAddressSpace => reason!("a shared (carrier-grade NAT) address"),
            Forbidden::LinkLocal => reason!("a link-local address"),
            Forbidden::Multicast => reason!("a multicast address"),
            Forbidden::Broadcast => reason!("a broadcast address"),
            Forbidden::Documentation => reason!("a documentation address"),
            Forbidden::Reserved => reason!("a reserved address"),
        }
    }
}

/// The refusal inside an error returned by a client that used a [`GuardedResolver`], if that is why it
/// failed: the resolver's error travels as the source of the client's connect error.
#[must_use]
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refused) = error.downcast_ref::<Refused>() {
            return Some(*refused);
        }
        current = error.source();
    }
    None
}

/// Looks a host name up. The system's resolver in production ([`SystemLookup`]); a test may give one that
/// answers as it likes (one that answers differently the second time, to prove no second lookup counts).
#[async_trait]
pub trait Lookup: Send + Sync {
    /// Every address of `host`.
    ///
    /// # Errors
    /// When the name cannot be resolved.
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemLookup;

#[async_trait]
impl Lookup for SystemLookup {
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0)).await?.map(|address| address.ip()).collect())
    }
}

/// The installation's egress settings (`[egress]`) and the resolver every guarded connection uses. Cheap
/// to clone.
#[derive(Clone)]
pub struct Egress {
    allow_private: Arc<[Cidr]>,
    lookup: Arc<dyn Lookup>,
}

impl Default for Egress {
    fn default() -> Self {
        Egress::new(Vec::new())
    }
}

impl Egress {
    /// `[egress] allow_private`: ranges an installation's own push service lives in, opened despite being
    /// private, shared, link-local, documentation or reserved space. Entries that
    /// [`Cidr::check_allowable`] refuses are checked at start-up; here they would change nothing, since
    /// loopback, unspecified, multicast and broadcast are never lifted.
    #[must_use]
    pub fn new(allow_private: Vec<Cidr>) -> Egress {
        Egress { allow_private: allow_private.into(), lookup: Arc::new(SystemLookup) }
    }

    /// With another resolver (tests).
    #[must_use]
    pub fn with_lookup(mut self, lookup: Arc<dyn Lookup>) -> Egress {
        self.lookup = lookup;
        self
    }

    /// The guard of one kind of user-controlled destination; `allow_loopback` only for a channel whose
    /// `allow_loopback_endpoints` says it posts to a local stand-in.
    #[must_use]
    pub fn guard(&self, allow_loopback: bool) -> Guard {
        Guard { allow_private: Arc::clone(&self.allow_private), allow_loopback, lookup: Arc::clone(&self.lookup) }
    }
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranges: Vec<String> = self.allow_private.iter().map(ToString::to_string).collect();
        f.debug_struct("Egress").field("allow_private", &ranges).finish_non_exhaustive()
    }
}

/// The checks for one kind of user-controlled destination.
#[derive(Clone)]
pub struct Guard {
    allow_private: Arc<[Cidr]>,
    allow_loopback: bool,
    lookup: Arc<dyn Lookup>,
}

impl Guard {
    /// Whether Herald may connect to `ip`.
    ///
    /// # Errors
    /// What kind of address it is.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        match classify(ip) {
            None => Ok(()),
            Some(Forbidden::Loopback) if self.allow_loopback => Ok(()),
            Some(class) if class.liftable() && self.allow_private.iter().any(|range| range.contains(ip)) => Ok(()),
            Some(class) => Err(Refused(class)),
        }
    }

    /// What can be checked of `url` without a lookup: an address literal (in whatever spelling the URL
    /// had, already one address here), a name that is loopback by definition (`localhost`,
    /// `*.localhost`), no host at all. Any other name passes here and is checked when it is resolved.
    ///
    /// # Errors
    /// What kind of address the host is.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        // The parser has already turned every numeric spelling into the one address it names (a name it
        // keeps is no address), and keeps IPv6 literals in brackets.
        let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
            return Err(Refused(Forbidden::Unspecified));
        };
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match literal.parse::<IpAddr>() {
            Ok(ip) => self.check_ip(ip),
            Err(_) if is_localhost(host) && !self.allow_loopback => Err(Refused(Forbidden::Loopback)),
            Err(_) => Ok(()),
        }
    }

    /// Resolves `host` once and checks every address: all of them, or a refusal (one forbidden address
    /// is enough — a client trying the addresses in turn would reach it).
    ///
    /// # Errors
    /// [`ResolveError::Refused`], or the lookup's failure.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if is_localhost(host) && !self.allow_loopback {
            return Err(ResolveError::Refused(Refused(Forbidden::Loopback)));
        }
        let addresses = self.lookup.lookup(host).await.map_err(ResolveError::Lookup)?;
        if addresses.is_empty() {
            return Err(ResolveError::Lookup(io::Error::new(io::ErrorKind::NotFound, "no address")));
        }
        for ip in &addresses {
            self.check_ip(*ip).map_err(ResolveError::Refused)?;
        }
        Ok(addresses)
    }

    /// The HTTP client's resolver for this guard: see [`GuardedResolver`].
    #[must_use]
    pub fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver(self.clone()))
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("allow_private", &self.allow_private.len())
            .field("allow_loopback", &self.allow_loopback)
            .finish_non_exhaustive()
    }
}

/// `localhost` and its subdomains (RFC 6761 §6.3), in any case, with or without the final dot.
fn is_localhost(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// Why a name gave no address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// An address the name resolved to is refused.
    #[error(transparent)]
    Refused(Refused),
    /// The lookup failed (no such name, no resolver).
    #[error("the name could not be resolved")]
    Lookup(#[source] io::Error),
}

/// A `reqwest` resolver that resolves through its [`Guard`], checks every address and returns exactly
/// those: the client connects to nothing it did not get from here, so what was checked is what is
/// connected to. A refusal is returned as the [`Refused`] error itself, which [`refusal_in`] finds in the
/// client's error.
pub struct GuardedResolver(Guard);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match guard.resolve(&host).await {
                Ok(addresses) => {
                    let addrs: Addrs = Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(ResolveError::Refused(refused)) => {
                    Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>)
                }
                Err(ResolveError::Lookup(error)) => Err(Box::new(error) as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn host_of(url: &str) -> IpAddr {
        let url = Url::parse(url).expect("a URL");
        let host = url.host_str().expect("a host");
        host.trim_start_matches('[').trim_end_matches(']').parse().unwrap_or_else(|_| panic!("{host} is a name"))
    }

    #[track_caller]
    fn refused(url: &str) -> Forbidden {
        let url = Url::parse(url).expect("a URL");
        Egress::default().guard(false).check_url(&url).expect_err("refused").0
    }

    #[test]
    fn every_spelling_of_loopback_is_loopback() {
        for spelling in [
            "https://127.0.0.1:8443/p",
            "https://127.1/p",
            "https://127.0.1/p",
            "https://2130706433/p",
            "https://0x7f000001/p",
            "https://0x7F.0.0.1/p",
            "https://0177.0.0.1/p",
            "https://0177.1/p",
            "https://127.0.0.1./p",
            "https://127.255.255.254/p",
            "https://[::1]/p",
            "https://[0:0:0:0:0:0:0:1]/p",
            "https://[::ffff:127.0.0.1]/p",
            "https://[::ffff:7f00:1]/p",
            "https://[::FFFF:7F00:0001]/p",
            "https://[::127.0.0.1]/p",
            "https://[::ffff:0:127.0.0.1]/p",
            "https://[64:ff9b::127.0.0.1]/p",
            "https://[64:ff9b::7f00:1]/p",
            "https://[2002:7f00:1::1]/p",
            "https://localhost/p",
            "https://LOCALHOST/p",
            "https://localhost./p",
            "https://LocalHost.:9/p",
            "https://push.localhost/p",
        ] {
            assert_eq!(refused(spelling), Forbidden::Loopback, "{spelling}");
        }
        // Teredo: the client's address is stored inverted (127.0.0.1 = 0x80ff:fffe).
        assert_eq!(refused("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/p"), Forbidden::Loopback);
    }

    #[test]
    fn the_url_parser_reads_every_spelling_as_the_address_it_names() {
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        for spelling in ["127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.1.", "0x7f.1", "127.0.0.01"] {
            assert_eq!(host_of(&format!("https://{spelling}/")), loopback, "{spelling}");
        }
        assert_eq!(host_of("https://[::ffff:127.0.0.1]/"), host_of("https://[::ffff:7f00:1]/"));
    }

    #[test]
    fn each_kind_of_inward_address_is_refused_for_what_it_is() {
        let cases = [
            ("https://0.0.0.0/", Forbidden::Unspecified),
            ("https://0/", Forbidden::Unspecified),
            ("https://[::]/", Forbidden::Unspecified),
            ("https://0.1.2.3/", Forbidden::Unspecified),
            ("https://10.0.0.1:8443/", Forbidden::Private),
            ("https://172.16.0.1/", Forbidden::Private),
            ("https://172.31.255.255/", Forbidden::Private),
            ("https://192.168.1.1/", Forbidden::Private),
            ("https://[fc00::1]/", Forbidden::Private),
            ("https://[fd12:3456::1]/", Forbidden::Private),
            ("https://[fec0::1]/", Forbidden::Private),
            ("https://[::ffff:10.0.0.1]/", Forbidden::Private),
            ("https://[::ffff:192.168.1.1]/", Forbidden::Private),
            ("https://[64:ff9b:1::a00:1]/", Forbidden::Private),
            ("https://100.64.0.1/", Forbidden::SharedAddressSpace),
            ("https://100.127.255.255/", Forbidden::SharedAddressSpace),
            ("https://169.254.169.254/latest/meta-data/", Forbidden::LinkLocal),
            ("https://[fe80::1]/", Forbidden::LinkLocal),
            ("https://[::ffff:169.254.169.254]/", Forbidden::LinkLocal),
            ("https://[64:ff9b::169.254.169.254]/", Forbidden::LinkLocal),
            ("https://224.0.0.1/", Forbidden::Multicast),
            ("https://239.255.255.250/", Forbidden::Multicast),
            ("https://[ff02::1]/", Forbidden::Multicast),
            ("https://255.255.255.255/", Forbidden::Broadcast),
            ("https://192.0.2.1/", Forbidden::Documentation),
            ("https://198.51.100.7/", Forbidden::Documentation),
            ("https://203.0.113.9/", Forbidden::Documentation),
            ("https://[2001:db8::1]/", Forbidden::Documentation),
            ("https://[3fff::1]/", Forbidden::Documentation),
            ("https://198.18.0.1/", Forbidden::Reserved),
            ("https://198.19.255.1/", Forbidden::Reserved),
            ("https://240.0.0.1/", Forbidden::Reserved),
            ("https://192.0.0.8/", Forbidden::Reserved),
            ("https://[100::1]/", Forbidden::Reserved),
            ("https://[2001:2::1]/", Forbidden::Reserved),
            ("https://[::8.8.8.8]/", Forbidden::Reserved),
            ("https://[4000::1]/", Forbidden::Reserved),
        ];
        for (url, expected) in cases {
            assert_eq!(refused(url), expected, "{url}");
        }
    }

    #[test]
    fn public_addresses_and_names_pass_without_a_lookup() {
        let guard = Egress::default().guard(false);
        for url in [
            "https://8.8.8.8/",
            "https://93.184.216.34:8443/p",
            "https://172.32.0.1/",
            "https://100.128.0.1/",
            "https://[2606:4700::1111]/",
            "https://[::ffff:8.8.8.8]/",
            "https://[64:ff9b::808:808]/",
            "https://[2002:808:808::1]/",
            "https://fcm.googleapis.com/fcm/send/x",
            "https://updates.push.services.mozilla.com/wpush/v2/x",
            "https://localhost.example.net/",
        ] {
            guard.check_url(&Url::parse(url).expect("url")).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn the_allowlist_opens_private_ranges_but_never_this_machine() {
        let egress = Egress::new(vec!["10.1.2.0/24".parse().expect("cidr"), "fd00::/8".parse().expect("cidr")]);
        let guard = egress.guard(false);
        let check = |url: &str| guard.check_url(&Url::parse(url).expect("url"));
        assert!(check("https://10.1.2.3/").is_ok());
        assert!(check("https://[::ffff:10.1.2.3]/").is_ok(), "the mapped form is the same address");
        assert!(check("https://[fd00::2]/").is_ok());
        assert_eq!(check("https://10.1.3.1/"), Err(Refused(Forbidden::Private)));
        assert_eq!(check("https://[fc00::1]/"), Err(Refused(Forbidden::Private)));
        // Even a range that would cover them lifts nothing of this machine, multicast or broadcast.
        let everything = Egress::new(vec!["0.0.0.0/0".parse().expect("cidr"), "::/0".parse().expect("cidr")]);
        let guard = everything.guard(false);
        for url in
            ["https://127.0.0.1/", "https://[::1]/", "https://0.0.0.0/", "https://224.0.0.1/", "https://localhost/"]
        {
            assert!(guard.check_url(&Url::parse(url).expect("url")).is_err(), "{url}");
        }
        assert!(guard.check_url(&Url::parse("https://169.254.169.254/").expect("url")).is_ok());
    }

    #[test]
    fn only_a_stand_in_channel_may_reach_loopback() {
        let guard = Egress::default().guard(true);
        for url in ["http://127.0.0.1:9/", "https://[::1]/", "http://localhost:9/"] {
            assert!(guard.check_url(&Url::parse(url).expect("url")).is_ok(), "{url}");
        }
        assert_eq!(
            guard.check_url(&Url::parse("https://10.0.0.1/").expect("url")),
            Err(Refused(Forbidden::Private)),
            "and nothing else"
        );
    }

    #[test]
    fn allowlist_entries_are_parsed_strictly() {
        assert_eq!("10.1.2.0/24".parse::<Cidr>().map(|c| c.to_string()), Ok("10.1.2.0/24".to_owned()));
        assert_eq!("fd00::/8".parse::<Cidr>().map(|c| c.to_string()), Ok("fd00::/8".to_owned()));
        assert_eq!("10.1.2.3".parse::<Cidr>().map(|c| c.to_string()), Ok("10.1.2.3/32".to_owned()));
        for bad in [
            "",
            "10.1.2.0/33",
            "10.1.2.0/",
            "10.1.2.0/-1",
            "10.1.2.0/+8",
            "fd00::/129",
            "10.1/8",
            "net/8",
            "10.1.2.5/24",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
        for refused in
            ["0.0.0.0/0", "127.0.0.0/8", "127.0.0.1", "126.0.0.0/7", "::/0", "::1", "::ffff:0:0/96", "ff00::/8"]
        {
            let cidr: Cidr = refused.parse().expect("parses");
            assert!(cidr.check_allowable().is_err(), "{refused}");
        }
        for fine in ["10.0.0.0/8", "100.64.0.0/10", "169.254.169.254", "fd00::/8", "192.0.2.0/24"] {
            let cidr: Cidr = fine.parse().expect("parses");
            assert!(cidr.check_allowable().is_ok(), "{fine}");
        }
    }

    #[test]
    fn refusals_never_name_the_host() {
        for class in [Forbidden::Loopback, Forbidden::Private, Forbidden::LinkLocal] {
            let reason = Refused(class).reason();
            assert!(!reason.contains("127") && !reason.contains("10.") && !reason.contains("169"), "{reason}");
        }
    }

    mod spellings {
        use super::*;
        use proptest::prelude::*;

        /// Ways of writing one IPv4 address in a URL host, as browsers and the URL standard accept them.
        fn spellings(ip: Ipv4Addr) -> Vec<String> {
            let [a, b, c, d] = ip.octets();
            let n = u32::from(ip);
            let low24 = n & 0x00ff_ffff;
            let low16 = n & 0xffff;
            let [hi6, lo6] = [n >> 16, n & 0xffff];
            vec![
                format!("{a}.{b}.{c}.{d}"),
                format!("{a}.{b}.{c}.{d}."),
                format!("{n}"),
                format!("0x{n:x}"),
                format!("0X{n:X}"),
                format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
                format!("0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}"),
                format!("{a}.{low24}"),
                format!("{a}.{b}.{low16}"),
                format!("[::ffff:{a}.{b}.{c}.{d}]"),
                format!("[::ffff:{hi6:x}:{lo6:x}]"),
                format!("[0:0:0:0:0:FFFF:{hi6:X}:{lo6:X}]"),
                format!("[64:ff9b::{hi6:x}:{lo6:x}]"),
                format!("[2002:{hi6:x}:{lo6:x}::1]"),
            ]
        }

        fn decision(guard: &Guard, host: &str) -> Result<(), Refused> {
            guard.check_url(&Url::parse(&format!("https://{host}:8443/push")).expect("a URL"))
        }

        proptest! {
            #[test]
            fn every_loopback_address_in_every_spelling_is_refused(low in 0u32..(1 << 24)) {
                let ip = Ipv4Addr::from((127u32 << 24) | low);
                let guard = Egress::default().guard(false);
                for host in spellings(ip) {
                    prop_assert_eq!(decision(&guard, &host), Err(Refused(Forbidden::Loopback)), "{}", host);
                }
            }

            #[test]
            fn every_spelling_of_an_address_gets_the_decision_of_the_address(n in any::<u32>()) {
                let ip = Ipv4Addr::from(n);
                let guard = Egress::default().guard(false);
                let expected = guard.check_ip(IpAddr::V4(ip));
                for host in spellings(ip) {
                    let got = decision(&guard, &host);
                    // 6to4 and NAT64 forms of a public address are public too; every other form must agree.
                    prop_assert_eq!(got, expected, "{} ({})", host, ip);
                }
            }

            #[test]
            fn a_private_range_is_open_only_where_listed(n in any::<u32>(), prefix in 8u8..=32) {
                let ip = Ipv4Addr::from(n);
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                let range: Cidr = format!("{}/{prefix}", Ipv4Addr::from(n & mask)).parse().expect("cidr");
                let guard = Egress::new(vec![range]).guard(false);
                let open = guard.check_ip(IpAddr::V4(ip)).is_ok();
                let class = classify(IpAddr::V4(ip));
                prop_assert_eq!(open, class.is_none_or(Forbidden::liftable), "{} in {}", ip, range);
                // And a mapped spelling is the same address.
                let mapped = IpAddr::V6(ip.to_ipv6_mapped());
                prop_assert_eq!(guard.check_ip(mapped).is_ok(), open);
            }
        }
    }
}
