//! Connections that hold server resources without doing their part (issue
//! 56, items 3 and 4): ICE-TCP connections that never authenticate, and
//! HTTP clients that never read, are closed at a deadline; one client IP
//! address holds a bounded number of either. Traffic goes to 127.0.0.1 only
//! (some clients use 127.0.0.2 as their source address, to be another
//! address than the test's own HTTP requests).
#![allow(
    clippy::disallowed_types,
    reason = "the test's ICE-TCP client thread reports to the test through flags; no shard state"
)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Server, start_server};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc};

const OTHER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn skip(test: &str) -> bool {
    corelay_testkit::skip_in_work_stealing(test, "no ICE-TCP in the work-stealing baseline")
}

/// A TCP connection to 127.0.0.1:`port` from `from` (any port), with a
/// receive buffer of `rcvbuf` bytes when given (set before connecting, so
/// the window stays that small).
fn connect(port: u16, from: Option<IpAddr>, rcvbuf: Option<usize>) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    if let Some(n) = rcvbuf {
        s.set_recv_buffer_size(n).expect("SO_RCVBUF");
    }
    if let Some(ip) = from {
        s.bind(&SocketAddr::new(ip, 0).into()).expect("bind source");
    }
    s.connect_timeout(&to.into(), Duration::from_secs(5))
        .expect("connect");
    s.into()
}

/// Whether the server closed `s`: end of stream or a reset, without
/// waiting (what was sent to it is read and discarded).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 4096];
    // Bounded: at most 16 MiB of what the server sent is read past.
    let mut closed = false;
    for _ in 0..4096 {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    let _ = s.set_nonblocking(false);
    closed
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Polls `f` every 100 ms until it holds or `within` passes; whether it held.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A str0m participant that joins over ICE-TCP only (its one candidate is
/// its end of a TCP connection to the shard's port) and runs until stopped.
struct IceTcpClient {
    stop: Arc<AtomicBool>,
    connected: Arc<AtomicBool>,
    /// The server closed the connection, or ICE gave up.
    lost: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl IceTcpClient {
    fn join(server: &Server, room: &str, name: &str, from: Option<IpAddr>) -> IceTcpClient {
        let stream = connect(server.udp_base, from, None);
        let local = stream.local_addr().expect("local address");
        let remote = stream.peer_addr().expect("peer address");
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .enable_h264(true)
            .build(Instant::now());
        rtc.add_local_candidate(Candidate::host(local, "tcp").expect("a TCP candidate"));
        let mut api = rtc.sdp_api();
        api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_channel("events".into());
        let (offer, pending) = api.apply().expect("an offer");
        let (status, _, body) = server.request(
            "POST",
            &format!("/api/v1/rooms/{room}/participants?name={name}"),
            &[("Content-Type", "application/sdp")],
            &offer.to_sdp_string(),
        );
        assert_eq!(status, 201, "join over ICE-TCP: {body}");
        let answer = SdpAnswer::from_sdp_string(&body).expect("an SDP answer");
        rtc.sdp_api()
            .accept_answer(pending, answer)
            .expect("the answer applies");
        let stop = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let flags = (stop.clone(), connected.clone(), lost.clone());
        let thread = std::thread::spawn(move || {
            drive(rtc, stream, local, remote, &flags.0, &flags.1, &flags.2);
        });
        IceTcpClient {
            stop,
            connected,
            lost,
            thread: Some(thread),
        }
    }

    fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for IceTcpClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `rtc` over `stream` (RFC 4571 frames) until `stop`, the server
/// closes, or two minutes pass.
fn drive(
    mut rtc: Rtc,
    mut stream: TcpStream,
    local: SocketAddr,
    remote: SocketAddr,
    stop: &AtomicBool,
    connected: &AtomicBool,
    lost: &AtomicBool,
) {
    let end = Instant::now() + Duration::from_secs(120);
    let mut inbox: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) && Instant::now() < end {
        // Everything str0m has to say, then wait for the server or its timer.
        let wake = loop {
            match rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    if t.proto != Protocol::Tcp {
                        continue;
                    }
                    let Ok(len) = u16::try_from(t.contents.len()) else {
                        continue;
                    };
                    let mut frame = len.to_be_bytes().to_vec();
                    frame.extend_from_slice(&t.contents);
                    if stream.write_all(&frame).is_err() {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                }
                Ok(Output::Timeout(t)) => break t,
                Ok(Output::Event(Event::Connected)) => connected.store(true, Ordering::SeqCst),
                Ok(Output::Event(Event::IceConnectionStateChange(
                    IceConnectionState::Disconnected,
                ))) => {
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
                Ok(Output::Event(_)) => {}
                Err(_) => {
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
            }
        };
        let now = Instant::now();
        let wait = wake
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), Duration::from_millis(50));
        let _ = stream.set_read_timeout(Some(wait));
        match stream.read(&mut buf) {
            Ok(0) => {
                lost.store(true, Ordering::SeqCst);
                return;
            }
            Ok(n) => inbox.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                lost.store(true, Ordering::SeqCst);
                return;
            }
        }
        let now = Instant::now();
        while let [a, b, rest @ ..] = inbox.as_slice() {
            let len = usize::from(u16::from_be_bytes([*a, *b]));
            let Some(frame) = rest.get(..len) else {
                break;
            };
            if let Ok(r) = Receive::new(Protocol::Tcp, remote, local, frame) {
                let _ = rtc.handle_input(Input::Receive(now, r));
            }
            inbox.drain(..2 + len);
        }
        let _ = rtc.handle_input(Input::Timeout(Instant::now()));
    }
}

/// A connection that sends nothing the server could accept (empty frames,
/// frames of junk) is closed at the ICE-TCP auth deadline, however busy it
/// keeps the connection, and its slot comes back: with the address's slots
/// all taken by such connections, a genuine ICE-TCP participant gets in
/// after the deadline.
#[test]
fn unauthenticated_ice_tcp_connections_are_closed_at_the_deadline() {
    if skip("unauthenticated_ice_tcp_connections_are_closed_at_the_deadline") {
        return;
    }
    let auth = Duration::from_secs(2);
    let server = start_server(
        1,
        &[
            "--ice-tcp-auth-timeout",
            "2s",
            "--ice-tcp-max-conns-per-ip",
            "4",
        ],
    );
    let start = Instant::now();
    let mut conns: Vec<TcpStream> = (0..4)
        .map(|_| connect(server.udp_base, None, None))
        .collect();
    let mut closed_at: Vec<Option<Duration>> = vec![None; conns.len()];
    // Every 200 ms: an empty frame on half of them, a junk frame on the rest.
    let all_closed = eventually(auth + Duration::from_secs(15), || {
        for (i, (s, at)) in conns.iter_mut().zip(closed_at.iter_mut()).enumerate() {
            if at.is_some() {
                continue;
            }
            let frame: &[u8] = if i % 2 == 0 {
                &[0, 0]
            } else {
                &[0, 4, 0xde, 0xad, 0xbe, 0xef]
            };
            if s.write_all(frame).is_err() || closed_by_server(s) {
                *at = Some(start.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        closed_at.iter().all(Option::is_some)
    });
    corelay_testkit::say(&format!(
        "unauthenticated ICE-TCP connections closed after {closed_at:?} (deadline {auth:?})"
    ));
    assert!(
        all_closed,
        "connections that never authenticated are closed within the deadline and a margin: {closed_at:?}"
    );
    drop(conns);
    // Their slots are back: a real ICE-TCP participant from the same address.
    let client = IceTcpClient::join(&server, "tcpauth", "genuine", None);
    assert!(
        eventually(Duration::from_secs(20), || client.connected()),
        "a genuine ICE-TCP participant connects once the squatters are gone"
    );
    assert!(!client.lost(), "and stays connected");
}

/// One address gets `--ice-tcp-max-conns-per-ip` connections per shard;
/// more are closed at once and hold no descriptor, and another address
/// still gets in.
#[test]
fn ice_tcp_connections_per_address_are_capped() {
    if skip("ice_tcp_connections_per_address_are_capped") {
        return;
    }
    let server = start_server(
        1,
        &[
            "--ice-tcp-max-conns-per-ip",
            "2",
            "--ice-tcp-auth-timeout",
            "60s",
        ],
    );
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| connect(server.udp_base, None, None))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let fds_held = open_fds(server.pid());
    let mut extra: Vec<TcpStream> = (0..6)
        .map(|_| connect(server.udp_base, None, None))
        .collect();
    let refused = eventually(Duration::from_secs(10), || {
        extra.iter_mut().all(closed_by_server)
    });
    let fds_after = open_fds(server.pid());
    corelay_testkit::say(&format!(
        "server descriptors: {fds_held} with 2 held, {fds_after} after 6 more were refused"
    ));
    assert!(
        refused,
        "connections past the per-address cap are closed at accept"
    );
    assert!(
        !held.iter_mut().any(closed_by_server),
        "the first two, within the cap and the deadline, stay open"
    );
    assert!(
        fds_after <= fds_held + 1,
        "refused connections hold no descriptor: {fds_held} before, {fds_after} after"
    );
    // Another address is not affected by this one's cap.
    let client = IceTcpClient::join(&server, "tcpcap", "other", Some(OTHER_IP));
    assert!(
        eventually(Duration::from_secs(20), || client.connected()),
        "an ICE-TCP participant from another address connects"
    );
}

/// A genuine ICE-TCP participant authenticates with its first STUN check
/// and stays connected well past the auth deadline (its checks and media
/// keep it alive).
#[test]
fn a_genuine_ice_tcp_participant_outlives_the_auth_deadline() {
    if skip("a_genuine_ice_tcp_participant_outlives_the_auth_deadline") {
        return;
    }
    let server = start_server(1, &["--ice-tcp-auth-timeout", "1s"]);
    let client = IceTcpClient::join(&server, "tcpkeep", "genuine", None);
    assert!(
        eventually(Duration::from_secs(20), || client.connected()),
        "the ICE-TCP participant connects"
    );
    // Five times the deadline.
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !client.lost(),
        "a participant that authenticated is not closed at the auth deadline"
    );
    let room = server.get_json("/api/v1/rooms/tcpkeep");
    assert!(
        room.to_string().contains("genuine"),
        "still in the room: {room}"
    );
}

/// An HTTP client that pipelines requests for a large asset and never
/// reads (a tiny receive window) is cut off at the write timeout, even with
/// a long header timeout; the server keeps answering others meanwhile.
#[test]
fn http_clients_that_never_read_are_closed_at_the_write_timeout() {
    let write_timeout = Duration::from_secs(2);
    let server = start_server(
        1,
        &[
            "--http-write-timeout",
            "2s",
            "--http-header-timeout",
            "120s",
        ],
    );
    let port: u16 = server
        .http
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("HTTP port");
    let pid = server.pid();
    let baseline = open_fds(pid);
    let request = format!(
        "GET /assets/app.js HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.http
    );
    let pipelined = request.repeat(200);
    let mut readers_never: Vec<TcpStream> = (0..30)
        .map(|_| {
            let mut s = connect(port, Some(OTHER_IP), Some(2048));
            s.write_all(pipelined.as_bytes()).expect("send requests");
            s
        })
        .collect();
    let start = Instant::now();
    // Held while the server writes into their full windows.
    let held = eventually(Duration::from_secs(5), || open_fds(pid) >= baseline + 25);
    let fds_held = open_fds(pid);
    let (status, _, _) = server.request("GET", "/healthz", &[], "");
    assert_eq!(
        status, 200,
        "/healthz answers while the stuck clients are held"
    );
    let released = eventually(write_timeout + Duration::from_secs(15), || {
        open_fds(pid) <= baseline + 2
    });
    let took = start.elapsed();
    let fds_after = open_fds(pid);
    corelay_testkit::say(&format!(
        "server descriptors: {baseline} before, {fds_held} with 30 stuck clients, {fds_after} {took:?} later (write timeout {write_timeout:?})"
    ));
    assert!(
        held,
        "the stuck clients were connected: {fds_held} descriptors vs {baseline}"
    );
    assert!(
        released,
        "clients that never read are closed within the write timeout and a margin: {fds_after} descriptors vs {baseline}"
    );
    assert!(
        readers_never.iter_mut().all(closed_by_server),
        "each stuck client sees its connection closed"
    );
    let (status, _, _) = server.request("GET", "/healthz", &[], "");
    assert_eq!(status, 200);
}

/// One address holds at most `--http-max-conns-per-ip` HTTP connections;
/// the next is closed at accept, and other addresses are served.
#[test]
fn http_connections_per_address_are_capped() {
    let server = start_server(1, &["--http-max-conns-per-ip", "4"]);
    let port: u16 = server
        .http
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("HTTP port");
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| connect(port, Some(OTHER_IP), None))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut over = connect(port, Some(OTHER_IP), None);
    // It may take the request before the close lands; it gets no answer.
    let _ = over.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        eventually(Duration::from_secs(10), || closed_by_server(&mut over)),
        "a connection past the per-address cap is closed"
    );
    assert!(
        !held.iter_mut().any(closed_by_server),
        "those within the cap stay open"
    );
    let (status, _, _) = server.request("GET", "/healthz", &[], "");
    assert_eq!(status, 200, "another address (127.0.0.1) is served");
    // A slot given back is taken again.
    drop(held.pop());
    let mut answer = Vec::new();
    let served = eventually(Duration::from_secs(10), || {
        let mut again = connect(port, Some(OTHER_IP), None);
        answer.clear();
        let _ = again.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let _ = again.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = again.read_to_end(&mut answer);
        answer.starts_with(b"HTTP/1.1 200")
    });
    assert!(
        served,
        "once one closes, a connection from that address is served again: {:?}",
        String::from_utf8_lossy(&answer)
    );
}
