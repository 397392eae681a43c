//! The accept loop: owns the server's connections. At most `limits.max_connections` are open
//! (more wait in the kernel's listen backlog); a client has `limits.header_timeout_ms` to send
//! a request's headers, and a kept-alive connection as long to start its next request, so
//! half-open and trickling connections (slowloris) are closed instead of held forever. On
//! shutdown it stops accepting, lets in-flight requests finish and closes idle connections.
//!
//! HTTP/1.1 only (no h2c): what every REST client speaks, and what these bounds cover.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most open connections.
    pub max_connections: usize,
    /// Time to send a request's headers.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains: stops accepting,
/// finishes in-flight requests (for at most 30 s), closes idle connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small JSON answers must not wait on Nagle's algorithm.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let conn = builder.serve_connection(TokioIo::new(tcp), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%remote, error = %e, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    // A client streaming a body forever must not hold the shutdown forever.
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN:?}; shutting down without them");
    }
}

/// How long shutdown waits for in-flight requests.
const DRAIN: Duration = Duration::from_secs(30);
