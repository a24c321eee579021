//! svc-capture: answers one WHIP-style SDP offer with a str0m `Rtc` in RTP
//! mode and records the video RTP it receives for a few seconds into a
//! `.crtp` fixture (format: `crates/core/tests/fixtures/svc/README.md`).
//!
//! ```text
//! svc-capture --codec vp9|av1 --out FILE [--seconds 4] [--http 127.0.0.1:0]
//! ```
//!
//! It prints `LISTEN http://ADDR/` once the HTTP listener is up; `GET /`
//! serves the publishing page (`page.html`, its settings in the query
//! string), `POST /whip` takes an `application/sdp` offer and returns the
//! answer. Driven by `capture.mjs`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, ExtensionSerializer, ExtensionValues};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};
use svc_capture::fixture::{MAGIC, Record, write_record};

const DD_URI: &str =
    "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension";
/// The id we offer for the DD in our map; the answer uses the offer's id.
const DD_ID: u8 = 12;
const PAGE: &str = include_str!("../page.html");

/// The dependency descriptor's raw bytes.
#[derive(Debug)]
struct Dd(Vec<u8>);

#[derive(Debug)]
struct DdRaw;

impl ExtensionSerializer for DdRaw {
    fn write_to(&self, _buf: &mut [u8], _ev: &ExtensionValues) -> usize {
        0
    }
    fn parse_value(&self, buf: &[u8], ev: &mut ExtensionValues) -> bool {
        ev.user_values.set(Dd(buf.to_vec()));
        true
    }
    fn is_video(&self) -> bool {
        true
    }
    fn is_audio(&self) -> bool {
        false
    }
    fn requires_two_byte_form(&self, _ev: &ExtensionValues) -> bool {
        true
    }
}

struct Args {
    codec: String,
    out: String,
    seconds: f64,
    http: String,
}

fn parse_args() -> Args {
    let mut a = Args {
        codec: "vp9".into(),
        out: String::new(),
        seconds: 4.0,
        http: "127.0.0.1:0".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| die(&format!("{k} needs a value")));
        match k.as_str() {
            "--codec" => a.codec = v,
            "--out" => a.out = v,
            "--seconds" => a.seconds = v.parse().unwrap_or_else(|_| die("bad --seconds")),
            "--http" => a.http = v,
            _ => die(&format!("unknown argument {k}")),
        }
    }
    if a.out.is_empty() || !matches!(a.codec.as_str(), "vp9" | "av1") {
        die("usage: svc-capture --codec vp9|av1 --out FILE [--seconds 4] [--http 127.0.0.1:0]");
    }
    a
}

fn die(msg: &str) -> ! {
    eprintln!("svc-capture: {msg}");
    std::process::exit(2)
}

fn main() {
    let args = parse_args();
    str0m::crypto::from_feature_flags().install_process_default();

    let listener = TcpListener::bind(&args.http).unwrap_or_else(|e| die(&format!("bind: {e}")));
    let http = listener.local_addr().unwrap();
    println!("LISTEN http://{http}/");
    std::io::stdout().flush().ok();

    let (tx, rx) = mpsc::channel::<(Rtc, UdpSocket)>();
    let codec = args.codec.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Err(e) = serve(conn, &codec, &tx) {
                eprintln!("svc-capture: http: {e}");
            }
        }
    });

    let (rtc, socket) = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| die("no offer within 60 s"));
    let recs = run(rtc, socket, Duration::from_secs_f64(args.seconds));

    let mut buf = MAGIC.to_vec();
    for r in &recs {
        write_record(&mut buf, r);
    }
    std::fs::write(&args.out, &buf).unwrap_or_else(|e| die(&format!("write {}: {e}", args.out)));
    summarize(&args.out, buf.len(), &recs);
}

fn summarize(out: &str, bytes: usize, recs: &[Record]) {
    let mut pts: Vec<u8> = recs.iter().map(|r| r.pt).collect();
    pts.sort_unstable();
    pts.dedup();
    let mut ssrcs: Vec<u32> = recs.iter().map(|r| r.ssrc).collect();
    ssrcs.sort_unstable();
    ssrcs.dedup();
    let dd = recs.iter().filter(|r| r.dd.is_some()).count();
    let markers = recs.iter().filter(|r| r.marker).count();
    println!(
        "WROTE {out}: {bytes} bytes, {} packets, pts {pts:?}, ssrcs {ssrcs:?}, {dd} with DD, {markers} with marker",
        recs.len()
    );
}

/// One HTTP/1.1 request per connection.
fn serve(conn: TcpStream, codec: &str, tx: &mpsc::Sender<(Rtc, UdpSocket)>) -> std::io::Result<()> {
    let mut r = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;

    let (status, ctype, resp) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/") => ("200 OK", "text/html", PAGE.to_string()),
        ("POST", "/whip") => match answer(&String::from_utf8_lossy(&body), codec) {
            Ok((rtc, socket, sdp)) => {
                eprintln!("svc-capture: offer:\n{}", String::from_utf8_lossy(&body));
                eprintln!("svc-capture: answer:\n{sdp}");
                tx.send((rtc, socket)).ok();
                ("201 Created", "application/sdp", sdp)
            }
            Err(e) => ("400 Bad Request", "text/plain", e),
        },
        _ => ("404 Not Found", "text/plain", "not found".into()),
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{resp}",
        resp.len()
    )
}

fn answer(offer: &str, codec: &str) -> Result<(Rtc, UdpSocket, String), String> {
    let offer = SdpOffer::from_sdp_string(offer).map_err(|e| format!("offer: {e}"))?;
    let mut cfg = RtcConfig::new()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_vp9(codec == "vp9")
        .enable_av1(codec == "av1");
    cfg.extension_map()
        .set(DD_ID, Extension::with_serializer(DD_URI, DdRaw));
    let mut rtc = cfg.build(Instant::now());
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = socket.local_addr().map_err(|e| e.to_string())?;
    rtc.add_local_candidate(Candidate::host(addr, "udp").map_err(|e| e.to_string())?);
    let answer = rtc
        .sdp_api()
        .accept_offer(offer)
        .map_err(|e| format!("accept: {e}"))?;
    let dd_id = rtc
        .direct_api()
        .extension_map()
        .iter()
        .find(|(_, e)| e.as_uri() == DD_URI)
        .map(|(id, _)| id);
    eprintln!("svc-capture: dependency descriptor extension id {dd_id:?}");
    Ok((rtc, socket, answer.to_sdp_string()))
}

/// The str0m loop: records every received RTP packet from the first one on
/// for `dur`.
fn run(mut rtc: Rtc, socket: UdpSocket, dur: Duration) -> Vec<Record> {
    let mut recs = Vec::new();
    let mut first: Option<Instant> = None;
    let started = Instant::now();
    let mut buf = vec![0u8; 2000];
    loop {
        if first.is_some_and(|t| t.elapsed() >= dur) {
            return recs;
        }
        if first.is_none() && started.elapsed() > Duration::from_secs(30) {
            die("no RTP within 30 s of the answer");
        }
        let timeout = match rtc
            .poll_output()
            .unwrap_or_else(|e| die(&format!("rtc: {e}")))
        {
            Output::Timeout(t) => t,
            Output::Transmit(t) => {
                socket.send_to(&t.contents, t.destination).ok();
                continue;
            }
            Output::Event(Event::RtpPacket(p)) => {
                first.get_or_insert_with(Instant::now);
                let h = &p.header;
                recs.push(Record {
                    marker: h.marker,
                    pt: *h.payload_type,
                    seq: h.sequence_number,
                    timestamp: h.timestamp,
                    ssrc: *h.ssrc,
                    dd: h.ext_vals.user_values.get::<Dd>().map(|d| d.0.clone()),
                    payload: p.payload.to_vec(),
                });
                continue;
            }
            Output::Event(e) => {
                if !matches!(e, Event::RtpPacket(_)) {
                    eprintln!("svc-capture: event {e:?}");
                }
                continue;
            }
        };
        let now = Instant::now();
        let wait = timeout
            .saturating_duration_since(now)
            .min(Duration::from_millis(50));
        if wait.is_zero() {
            rtc.handle_input(Input::Timeout(now)).ok();
            continue;
        }
        socket.set_read_timeout(Some(wait)).ok();
        let input = match socket.recv_from(&mut buf) {
            Ok((n, source)) => match buf[..n].try_into() {
                Ok(contents) => Input::Receive(
                    Instant::now(),
                    Receive {
                        proto: Protocol::Udp,
                        source,
                        destination: socket.local_addr().unwrap(),
                        contents,
                    },
                ),
                Err(_) => continue,
            },
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Input::Timeout(Instant::now())
            }
            Err(e) => die(&format!("udp: {e}")),
        };
        if let Err(e) = rtc.handle_input(input) {
            eprintln!("svc-capture: input: {e}");
        }
    }
}
