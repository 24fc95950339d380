//! The accept loop, and the two things `axum::serve` cannot do: close one connection without
//! a response, and close connections that hang when the stand-in shuts down.
//!
//! Each connection is served by hyper's HTTP/1 server in its own task, raced against a
//! per-connection [`ConnectionAbort`]. A handler that wants to drop the connection notifies it;
//! the task then drops hyper's connection future, which closes the socket with no response
//! bytes written, so the client sees "connection closed before message completed", not a 500.
//! (A handler that panics or returns a failing body would instead give a 500 or a truncated
//! 200, which is a different case.)

use std::future::pending;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// Lets a handler close the connection it is serving. Inserted into every request's
/// extensions by [`serve`].
#[derive(Clone, Debug)]
pub(crate) struct ConnectionAbort(Arc<Notify>);

impl ConnectionAbort {
    /// Closes the connection without a response. Never returns: the connection task drops
    /// this handler's future together with the connection.
    pub(crate) async fn drop_connection(&self) -> Response {
        self.0.notify_one();
        pending().await
    }
}

/// When the request's head arrived, before its body was read and before it was routed: what
/// [`StandIn::request_times`](super::StandIn::request_times) records, so that a busy handler does not
/// make two requests look closer together (or further apart) than they arrived. Inserted into every
/// request's extensions by [`serve`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrived(pub(crate) Instant);

/// Serves `router` on `listener` until `shutdown` fires or its sender is dropped, then closes
/// every open connection, including the ones held by `HangAfterAccept`.
pub(crate) async fn serve(listener: TcpListener, router: Router, mut shutdown: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve_connection(stream, router.clone()));
                }
                // Running out of file descriptors under a benchmark is transient; back off
                // briefly instead of spinning on the same error.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            // Reap finished connections so a long benchmark does not accumulate them.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn serve_connection(stream: TcpStream, router: Router) {
    // Small request/response pairs: do not let Nagle delay the answer.
    let _ = stream.set_nodelay(true);
    let abort = Arc::new(Notify::new());
    let handle = ConnectionAbort(Arc::clone(&abort));
    let service = service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(Arrived(Instant::now()));
        request.extensions_mut().insert(handle.clone());
        // `Router`'s error type is `Infallible`: every failure is already a response.
        router.clone().oneshot(request)
    });
    // No header-read timeout: clients are local and trusted, and a timer that closes an idle
    // keep-alive connection races with the client's next request on it, which would show up
    // as a spurious connection error. Shutdown closes whatever is left.
    let connection = http1::Builder::new().header_read_timeout(None).serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        // Protocol errors (a client that vanished mid-request) are the client's business.
        _ = connection => {}
        // Dropping `connection` here closes the socket without writing a response.
        () = abort.notified() => {}
    }
}
