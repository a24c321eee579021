//! HTTP connections: the accept loop, what one connection may hold, and
//! shutdown with a deadline.
//!
//! HTTP/1.1 only (what WHIP/WHEP and browsers use for this API). A client
//! has `header_timeout` to send a request's headers, and an idle keep-alive
//! connection waits that long for its next request (hyper's header-read
//! timer runs from the moment it waits for a request head); bodies are
//! bounded in size and time by the handlers ([`super::http`]). On shutdown,
//! every connection is asked to finish its request and close; whatever is
//! left after the deadline is dropped and the server exits anyway.
//!
//! Must not: know routes or the API (it serves any `Router`).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Most bytes hyper buffers from one connection (a request head must fit;
/// bodies stream through it).
const MAX_BUFFER_BYTES: usize = 32 * 1024;
/// Most headers in one request.
const MAX_HEADERS: usize = 64;

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    pub shutdown_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then closes the
/// connections within `limits.shutdown_timeout`. Returns whether every
/// connection closed in time.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUFFER_BYTES)
        .max_headers(MAX_HEADERS)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("http connection: {e}");
            }
        });
    }
    drop(listener);
    let open = graceful.count();
    tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(limits.shutdown_timeout) => {
            tracing::warn!(
                open,
                "HTTP connections still open after the shutdown deadline ({:?}); closing them",
                limits.shutdown_timeout
            );
            false
        }
    }
}
