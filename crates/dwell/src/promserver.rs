//! A tiny HTTP responder for the Prometheus text endpoint (std::net only).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The text served at `/metrics`, replaced by the poll loop each interval.
#[derive(Clone, Default)]
pub struct Exposition(Arc<Mutex<String>>);

impl Exposition {
    /// Replaces the served text.
    pub fn set(&self, text: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Binds `addr` and serves `/metrics` from `expo` on a background thread.
/// Returns the bound address (useful with port 0).
pub fn serve(addr: SocketAddr, expo: Exposition) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    thread::Builder::new()
        .name("dwell-prometheus".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        // One request per connection, handled inline: the
                        // body is small and scrapes are rare.
                        let _ = handle(stream, &expo);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(50)),
                }
            }
        })?;
    Ok(local)
}

fn handle(mut stream: TcpStream, expo: &Exposition) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 4096];
    let mut len = 0;
    // Read until the end of the request head (or the buffer is full).
    while len < buf.len() {
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n")
            || buf[..len].windows(2).any(|w| w == b"\n\n")
        {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut parts = head.split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            expo.get(),
        ),
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "corelay-dwell: metrics at /metrics\n".to_string(),
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "method not allowed\n".to_string(),
        ),
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        resp.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&resp)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_metrics_and_404() {
        let expo = Exposition::default();
        expo.set("corelay_dwell_events_total{event=\"read\"} 3\n".into());
        let addr = serve("127.0.0.1:0".parse().unwrap(), expo.clone()).unwrap();
        let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("text/plain; version=0.0.4"));
        assert!(r.ends_with("{event=\"read\"} 3\n"));
        expo.set("x 1\n".into());
        let r = get(addr, "GET /metrics?foo=1 HTTP/1.0\r\n\r\n");
        assert!(r.ends_with("\r\n\r\nx 1\n"), "{r}");
        let r = get(addr, "GET /nope HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404"));
        let r = get(addr, "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405"));
        // A client that connects and says nothing does not wedge the server.
        let idle = TcpStream::connect(addr).unwrap();
        drop(idle);
        let r = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK"));
    }
}
