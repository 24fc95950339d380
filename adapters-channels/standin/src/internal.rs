//! A service of the machine's own network that no user may make Herald reach (SPEC §16): the target of the
//! egress guard's tests.
//!
//! It listens on one port of every local address, IPv4 and IPv6 alike (`[::]`, dual stack), accepts every
//! TCP connection, records the local address the connection was made *to* — `127.0.0.1`, `::1`, the
//! machine's own interface address … — and closes it. A TLS client fails its handshake there, a plain
//! HTTP client gets no answer: what counts is that the connection was opened at all, and to which address.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running listener on every local address. Dropping it stops accepting.
pub struct InternalService {
    port: u16,
    seen: Arc<Mutex<Vec<IpAddr>>>,
    accept: JoinHandle<()>,
}

impl InternalService {
    /// Starts listening on `[::]` (IPv4 too, where the system maps it) at an ephemeral port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> io::Result<InternalService> {
        let listener = TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)).await?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if let Ok(local) = stream.local_addr() {
                    record.lock().unwrap_or_else(PoisonError::into_inner).push(local.ip().to_canonical());
                }
                drop(stream);
            }
        });
        Ok(InternalService { port, seen, accept })
    }

    /// The port, the same on every local address.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The local address of every connection accepted so far, in order (an IPv4 connection as its IPv4
    /// address, not the mapped form).
    #[must_use]
    pub fn connections(&self) -> Vec<IpAddr> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for InternalService {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl std::fmt::Debug for InternalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalService").field("port", &self.port).finish_non_exhaustive()
    }
}
