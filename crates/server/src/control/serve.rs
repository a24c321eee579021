//! HTTP connections: the accept loop, what one connection may hold, and
//! shutdown with a deadline.
//!
//! HTTP/1.1 only (what WHIP/WHEP and browsers use for this API). A client
//! has `header_timeout` to send a request's headers, and an idle keep-alive
//! connection waits that long for its next request (hyper's header-read
//! timer runs from the moment it waits for a request head); bodies are
//! bounded in size and time by the handlers ([`super::http`]). A client that
//! stops taking the response (never reads, or pipelines requests into a
//! full receive window) is cut off after `write_timeout` without any write
//! progress ([`WriteDeadline`]: hyper's header timer does not run while it
//! is blocked writing). A client IP address holds at most
//! `max_conns_per_ip` connections; more are closed at accept. On shutdown,
//! every connection is asked to finish its request and close; whatever is
//! left after the deadline is dropped and the server exits anyway.
//!
//! Must not: know routes or the API (it serves any `Router`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Most bytes hyper buffers from one connection (a request head must fit;
/// bodies stream through it).
const MAX_BUFFER_BYTES: usize = 32 * 1024;
/// Most headers in one request.
const MAX_HEADERS: usize = 64;

/// Default for `--http-max-conns-per-ip`: a browser opens at most six
/// connections to a host, and keep-alive ones close after the header
/// timeout: 64 is ten busy browsers behind one NAT address, while one
/// address cannot take the process's descriptors.
pub const MAX_CONNS_PER_IP: usize = 64;

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    /// A connection that takes no response bytes for this long is closed.
    pub write_timeout: Duration,
    /// Open connections per client IP address.
    pub max_conns_per_ip: usize,
    pub shutdown_timeout: Duration,
}

/// Open connections by client IP address (entries at zero are removed).
#[derive(Clone, Default)]
struct PerIp(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl PerIp {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // A panic while holding it left the map consistent (single ops).
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for one more connection from `ip`, unless it has `max`.
    fn take(&self, ip: IpAddr, max: usize) -> Option<IpSlot> {
        let mut counts = self.counts();
        let n = counts.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            per_ip: self.clone(),
            ip,
        })
    }
}

/// One connection's place in [`PerIp`], given back when dropped.
struct IpSlot {
    per_ip: PerIp,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.per_ip.counts();
        if let Some(n) = counts.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// A connection's socket whose writes (and flushes, and shutdown) fail with
/// `TimedOut` once the client has taken nothing for `timeout`: hyper then
/// drops the connection. Reads are untouched (hyper times the request
/// head; the handlers time bodies). It holds the connection's [`IpSlot`].
struct WriteDeadline {
    io: TcpStream,
    timeout: Duration,
    /// Since when a write waits, as a timer; cleared by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    _slot: IpSlot,
}

impl WriteDeadline {
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.timeout;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no response bytes within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, polled)
    }
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
    let per_ip = PerIp::default();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        let Some(slot) = per_ip.take(peer.ip(), limits.max_conns_per_ip) else {
            tracing::debug!(%peer, "HTTP connection refused: too many from this address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = WriteDeadline {
            io: stream,
            timeout: limits.write_timeout,
            stalled: None,
            _slot: slot,
        };
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection(TokioIo::new(io), service);
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
