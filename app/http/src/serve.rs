//! Serving a router: Herald's own accept loop over hyper, so that the header-read timeout holds and each
//! request carries its peer's address, and a graceful stop.

use std::time::Duration;

use axum::Router;

/// Serves the router until `shutdown` resolves, then lets requests in flight finish (at most `grace`),
/// with the default header-read timeout.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    serve_bounded(listener, router, shutdown, grace, crate::api::limits::Limits::default().header_read_timeout).await
}

/// As [`serve`]; a connection that has not sent a whole request head within `header_read_timeout` is
/// closed (also between requests of a kept-alive connection), so slow clients hold no connection for
/// long. HTTP/1.1, one hyper connection task per client.
///
/// # Errors
/// Never for a failed `accept` (logged, and the loop goes on); the result is kept for callers.
pub async fn serve_bounded(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
    header_read_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // The peer's address travels with each request (`ConnectInfo`): the limits key anonymous
                // requests and failed sign-ins by it.
                let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                    router.clone(),
                    move |mut request: hyper::Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                        request.map(axum::body::Body::new)
                    },
                ));
                let mut close = close_rx.clone();
                connections.spawn(async move {
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
                    let mut connection = std::pin::pin!(builder.serve_connection(TokioIo::new(stream), service));
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        () = async { let _ = close.wait_for(|closing| *closing).await; } => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    close_tx.send_replace(true);
    let drained = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("requests still running after the shutdown grace period; stopping anyway");
        connections.abort_all();
    }
    Ok(())
}
