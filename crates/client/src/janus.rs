//! The Janus dialect: Janus's HTTP API (janus.plugin.videoroom, Janus 1.x
//! multistream) for the same virtual participants, so corelay-bench can
//! measure Janus with the media and figures it uses for corelay.
//!
//! Janus uses one PeerConnection to publish and another to subscribe, so a
//! participant here is two str0m instances, each with its own socket:
//!
//! - **publisher** ([`publish`]): `POST {url} {"janus":"create"}` (session),
//!   `attach` `janus.plugin.videoroom` (handle), `create` the room unless it
//!   exists (error 427 is fine), `join` as `ptype: publisher` (the event
//!   carries our feed id), then `configure` with our sendonly offer as
//!   `jsep`; Janus's answer arrives as an asynchronous event on the
//!   session's long poll (`GET {url}/{session}?maxev=..`).
//! - **subscriber** ([`subscribe`]): another handle on the same session,
//!   `join` as `ptype: subscriber` with `streams: [{feed}..]`; Janus offers
//!   (in an event), a receive-only [`Participant::answer`] answers with
//!   `{"request":"start"}` and the answer as `jsep`.
//!
//! - **more feeds** ([`subscribe_more`]): a publisher that is up after the
//!   subscription was made is added with `{"request":"subscribe","streams":
//!   [{feed}..]}` on the subscriber handle (Janus 1.x multistream); Janus
//!   answers with an `updated` event and a new offer, the subscription's
//!   participant answers it ([`Participant::accept_offer`]: the new m-lines
//!   become receive slots) and the answer goes back with
//!   `{"request":"start"}`. Janus renegotiates one offer at a time per
//!   handle: callers must not overlap two requests on one subscription
//!   (corelay-bench queues the feeds that come up meanwhile and adds them
//!   in one request).
//!
//! Janus drops sessions that are quiet for its `session_timeout` (60 s by
//! default): call [`Session::keepalive`] every [`KEEPALIVE_INTERVAL`].
//! [`Session::leave`] detaches the handles and destroys the session.
//!
//! Everything Janus sends is external input: a missing field, an error
//! reply or an event that does not come is a [`JoinError`], never a panic,
//! and every wait is bounded ([`EVENT_TIMEOUT`]).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ureq::Agent;

use crate::clock;
use crate::participant::{Participant, ParticipantConfig};
use crate::signal::JoinError;

/// The plugin every handle attaches to.
pub const PLUGIN: &str = "janus.plugin.videoroom";
/// Longest wait for an asynchronous event (the answer, the offer, `started`).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a session needs a keepalive (Janus's default timeout is 60 s).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// VideoRoom's "room already exists".
const ROOM_EXISTS: i64 = 427;
/// VideoRoom's "no such feed": also what a subscriber gets for a publisher
/// whose PeerConnection is not up yet.
const NO_SUCH_FEED: i64 = 428;
/// Tries of a subscription while a feed is not up yet, 200 ms apart.
const FEED_TRIES: usize = 25;
/// Events fetched per long poll.
const MAX_EVENTS: usize = 16;

fn agent() -> &'static Agent {
    static AGENT: OnceLock<Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        Agent::config_builder()
            .http_status_as_error(false)
            // Janus holds a long poll for up to 30 s.
            .timeout_global(Some(Duration::from_secs(40)))
            .max_redirects(0)
            .build()
            .into()
    })
}

fn transaction() -> String {
    format!("cb{:016x}", fastrand::u64(..))
}

/// A Janus error reply or a reply without what it should carry.
fn bad(what: impl Into<String>, reply: &Value) -> JoinError {
    JoinError {
        status: Some(200),
        body: format!("{}: {reply}", what.into()),
        retry_after: None,
    }
}

fn read_json(mut resp: ureq::http::Response<ureq::Body>, what: &str) -> Result<Value, JoinError> {
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default();
    if status != 200 {
        return Err(JoinError {
            status: Some(status),
            body: format!("{what}: {body}"),
            retry_after: None,
        });
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| JoinError {
        status: Some(status),
        body: format!("{what}: bad JSON ({e}): {body}"),
        retry_after: None,
    })?;
    // {"janus":"error","error":{"code":458,"reason":"No such session"}}
    if v.get("janus").and_then(Value::as_str) == Some("error") {
        let code = v.pointer("/error/code").and_then(Value::as_i64);
        let reason = v
            .pointer("/error/reason")
            .and_then(Value::as_str)
            .unwrap_or("?");
        return Err(JoinError {
            status: Some(status),
            body: format!("{what}: janus error {}: {reason}", code.unwrap_or(0)),
            retry_after: None,
        });
    }
    Ok(v)
}

fn post(url: &str, body: &Value, what: &str) -> Result<Value, JoinError> {
    let resp = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .map_err(|e| JoinError::local(format!("{what}: POST {url}: {e}")))?;
    read_json(resp, what)
}

/// The VideoRoom room number for a room name: 53 bits of its FNV-1a hash
/// (JSON numbers stay exact), never 0.
pub fn room_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & ((1 << 53) - 1)).max(1)
}

const VIDEOROOM_ERROR: &str = "videoroom error";

/// Whether `e` is VideoRoom error `code`.
fn is_videoroom_error(e: &JoinError, code: i64) -> bool {
    e.body.contains(&format!("{VIDEOROOM_ERROR} {code}:"))
}

/// The `data` of a reply's `plugindata`, with a VideoRoom error turned into
/// a [`JoinError`] (unless its code is `allowed`).
fn plugin_data(reply: &Value, what: &str, allowed: Option<i64>) -> Result<Value, JoinError> {
    let data = reply
        .pointer("/plugindata/data")
        .ok_or_else(|| bad(format!("{what}: no plugindata"), reply))?;
    if let Some(code) = data.get("error_code").and_then(Value::as_i64) {
        if Some(code) != allowed {
            let msg = data.get("error").and_then(Value::as_str).unwrap_or("?");
            return Err(bad(
                format!("{what}: {VIDEOROOM_ERROR} {code}: {msg}"),
                reply,
            ));
        }
    }
    Ok(data.clone())
}

/// A Janus session (`POST {url} {"janus":"create"}`).
#[derive(Debug, Clone)]
pub struct Session {
    url: String,
    id: u64,
}

impl Session {
    /// Create a session. `url` is the API root, e.g. `http://127.0.0.1:18088/janus`.
    pub fn create(url: &str) -> Result<Session, JoinError> {
        let url = url.trim_end_matches('/').to_string();
        let r = post(
            &url,
            &json!({"janus": "create", "transaction": transaction()}),
            "create session",
        )?;
        let id = r
            .pointer("/data/id")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("create session: no data.id", &r))?;
        Ok(Session { url, id })
    }

    /// The session id.
    pub fn id(&self) -> u64 {
        self.id
    }

    fn session_url(&self) -> String {
        format!("{}/{}", self.url, self.id)
    }

    /// Attach a VideoRoom handle; returns its id.
    pub fn attach(&self) -> Result<u64, JoinError> {
        let r = post(
            &self.session_url(),
            &json!({"janus": "attach", "plugin": PLUGIN, "transaction": transaction()}),
            "attach",
        )?;
        r.pointer("/data/id")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("attach: no data.id", &r))
    }

    /// Send a plugin message; returns (transaction, reply). Synchronous
    /// requests (`create`) reply `success` with `plugindata`; the others
    /// reply `ack` and answer later in an event ([`Session::wait_event`]).
    fn message(
        &self,
        handle: u64,
        body: Value,
        jsep: Option<Value>,
        what: &str,
    ) -> Result<(String, Value), JoinError> {
        let tx = transaction();
        let mut m = json!({"janus": "message", "transaction": tx, "body": body});
        if let Some(j) = jsep {
            m["jsep"] = j;
        }
        let r = post(&format!("{}/{handle}", self.session_url()), &m, what)?;
        Ok((tx, r))
    }

    /// An asynchronous request: expects `ack` (or an immediate event) and
    /// waits for the event of its transaction; returns the plugin data and
    /// the `jsep`, if any.
    fn request_async(
        &self,
        handle: u64,
        body: Value,
        jsep: Option<Value>,
        what: &str,
    ) -> Result<(Value, Option<Value>), JoinError> {
        let (tx, r) = self.message(handle, body, jsep, what)?;
        match r.get("janus").and_then(Value::as_str) {
            Some("ack") => self.wait_event(&tx, what, EVENT_TIMEOUT),
            // Some replies come at once (a synchronous error, for one).
            Some("success") | Some("event") => {
                let data = plugin_data(&r, what, None)?;
                Ok((data, r.get("jsep").cloned()))
            }
            _ => Err(bad(format!("{what}: unexpected reply"), &r)),
        }
    }

    /// Long-poll the session until the event of `tx` arrives (others are
    /// dropped) or `timeout` passes.
    pub fn wait_event(
        &self,
        tx: &str,
        what: &str,
        timeout: Duration,
    ) -> Result<(Value, Option<Value>), JoinError> {
        let deadline = Instant::now() + timeout;
        // Bounded by the deadline: every poll takes at least a round trip,
        // and at most the time left.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(JoinError::local(format!(
                    "{what}: no event from Janus within {} s",
                    timeout.as_secs()
                )));
            }
            let url = format!(
                "{}?maxev={MAX_EVENTS}&rid={}",
                self.session_url(),
                clock::mono_ns() / 1_000_000
            );
            let resp = agent()
                .get(&url)
                .config()
                .timeout_global(Some(left.max(Duration::from_millis(100))))
                .build()
                .call();
            let resp = match resp {
                Ok(r) => r,
                // A timeout of the poll itself: the deadline decides.
                Err(ureq::Error::Timeout(_)) => continue,
                Err(e) => return Err(JoinError::local(format!("{what}: GET {url}: {e}"))),
            };
            let v = read_json(resp, what)?;
            let events = match v {
                Value::Array(a) => a,
                other => vec![other],
            };
            for ev in events {
                if ev.get("transaction").and_then(Value::as_str) != Some(tx) {
                    continue; // keepalive, webrtcup, media, other handles' news
                }
                if ev.get("janus").and_then(Value::as_str) != Some("event") {
                    continue;
                }
                let data = plugin_data(&ev, what, None)?;
                return Ok((data, ev.get("jsep").cloned()));
            }
        }
    }

    /// Create room `room` for up to `publishers` publishers (H.264 or VP8
    /// video, Opus audio; no bitrate cap, no periodic FIR). An existing
    /// room is fine.
    pub fn ensure_room(
        &self,
        handle: u64,
        room: u64,
        publishers: usize,
        videocodec: &str,
    ) -> Result<(), JoinError> {
        let (_, r) = self.message(
            handle,
            json!({
                "request": "create",
                "room": room,
                "publishers": publishers,
                "videocodec": videocodec,
                "audiocodec": "opus",
                "bitrate": 0,
                "fir_freq": 0,
                "notify_joining": false,
                "permanent": false,
            }),
            None,
            "create room",
        )?;
        plugin_data(&r, "create room", Some(ROOM_EXISTS)).map(|_| ())
    }

    /// `{"janus":"keepalive"}`.
    pub fn keepalive(&self) -> Result<(), JoinError> {
        post(
            &self.session_url(),
            &json!({"janus": "keepalive", "transaction": transaction()}),
            "keepalive",
        )
        .map(|_| ())
    }

    /// `{"janus":"detach"}` a handle.
    pub fn detach(&self, handle: u64) -> Result<(), JoinError> {
        post(
            &format!("{}/{handle}", self.session_url()),
            &json!({"janus": "detach", "transaction": transaction()}),
            "detach",
        )
        .map(|_| ())
    }

    /// `{"janus":"destroy"}` the session.
    pub fn destroy(&self) -> Result<(), JoinError> {
        post(
            &self.session_url(),
            &json!({"janus": "destroy", "transaction": transaction()}),
            "destroy",
        )
        .map(|_| ())
    }

    /// Detach `handles`, then destroy the session; the first error, if any
    /// (the destroy is tried regardless).
    pub fn leave(&self, handles: &[u64]) -> Result<(), JoinError> {
        let mut first = None;
        for &h in handles {
            if let Err(e) = self.detach(h) {
                first.get_or_insert(e);
            }
        }
        if let Err(e) = self.destroy() {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }
}

/// A publisher that Janus accepted (answer applied), not driven yet: hand
/// `participant` and `socket` to a [`crate::Driver`].
pub struct Publisher {
    /// The sendonly participant.
    pub participant: Box<Participant>,
    /// Its socket.
    pub socket: UdpSocket,
    /// The session (subscribe on it; keep it alive; leave it).
    pub session: Session,
    /// The publisher handle.
    pub handle: u64,
    /// The room number.
    pub room: u64,
    /// Our feed id in the room (what subscribers ask for).
    pub feed: u64,
    /// CLOCK_MONOTONIC ns just before the session was created.
    pub post_ns: u64,
    /// The offer sent.
    pub offer: String,
}

fn bind(bind_ip: IpAddr) -> Result<(UdpSocket, SocketAddr), JoinError> {
    let socket = UdpSocket::bind(SocketAddr::new(bind_ip, 0))
        .map_err(|e| JoinError::local(format!("bind {bind_ip}:0: {e}")))?;
    let local = socket
        .local_addr()
        .map_err(|e| JoinError::local(format!("local_addr: {e}")))?;
    Ok((socket, local))
}

fn sdp_of(jsep: Option<&Value>, kind: &str, what: &str) -> Result<String, JoinError> {
    let Some(j) = jsep else {
        return Err(JoinError::local(format!("{what}: event without jsep")));
    };
    if j.get("type").and_then(Value::as_str) != Some(kind) {
        return Err(bad(format!("{what}: jsep is not an {kind}"), j));
    }
    j.get("sdp")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| bad(format!("{what}: jsep without sdp"), j))
}

/// Join room `room_name` (created for `publishers` publishers if needed) as
/// a publisher of what `cfg` publishes. Receive slots and the data channel
/// of `cfg` are dropped: Janus delivers media on the subscription
/// ([`subscribe`]). On failure the session is destroyed again.
pub fn publish(
    url: &str,
    room_name: &str,
    publishers: usize,
    bind_ip: IpAddr,
    mut cfg: ParticipantConfig,
) -> Result<Publisher, JoinError> {
    cfg.video_slots = 0;
    cfg.audio_slots = 0;
    cfg.data_channel = false;
    if !cfg.simulcast.is_empty() {
        return Err(JoinError::local(
            "the Janus dialect does not publish simulcast",
        ));
    }
    let (publish_audio, publish_video) = (cfg.publish_audio, cfg.publish_video);
    let videocodec = match cfg.codec {
        crate::VideoCodec::H264 => "h264",
        crate::VideoCodec::Vp8 => "vp8",
        crate::VideoCodec::Vp9 => "vp9",
        crate::VideoCodec::Av1 => "av1",
    };
    let display = cfg.name.clone();
    let (socket, local) = bind(bind_ip)?;
    let (mut participant, offer) =
        Participant::new(cfg, local, Instant::now()).map_err(JoinError::local)?;
    let post_ns = clock::mono_ns();
    let session = Session::create(url)?;
    let room = room_id(room_name);
    let mut steps = || -> Result<(u64, u64), JoinError> {
        let handle = session.attach()?;
        session.ensure_room(handle, room, publishers, videocodec)?;
        let (data, _) = session.request_async(
            handle,
            json!({"request": "join", "ptype": "publisher", "room": room, "display": display}),
            None,
            "join as publisher",
        )?;
        let feed = data
            .get("id")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("join as publisher: no id", &data))?;
        let (_, jsep) = session.request_async(
            handle,
            json!({"request": "configure", "audio": publish_audio, "video": publish_video}),
            Some(json!({"type": "offer", "sdp": offer, "trickle": false})),
            "configure",
        )?;
        let answer = sdp_of(jsep.as_ref(), "answer", "configure")?;
        participant
            .accept_answer(&answer)
            .map_err(|e| JoinError::local(format!("{e}; answer was: {answer}")))?;
        Ok((handle, feed))
    };
    match steps() {
        Ok((handle, feed)) => Ok(Publisher {
            participant: Box::new(participant),
            socket,
            session,
            handle,
            room,
            feed,
            post_ns,
            offer,
        }),
        Err(e) => {
            let _ = session.destroy();
            Err(e)
        }
    }
}

/// A subscription Janus set up (our answer sent and `started`), not driven
/// yet.
pub struct Subscriber {
    /// The receive-only participant (one slot per offered m-line).
    pub participant: Box<Participant>,
    /// Its socket.
    pub socket: UdpSocket,
    /// The subscriber handle.
    pub handle: u64,
    /// Janus's offer.
    pub offer: String,
}

/// Subscribe on `session` to `feeds` of `room` (every stream of each) with
/// a receive-only participant built from `cfg` (its name, codec, clock,
/// tag; see [`Participant::answer`]). A feed whose publisher is not up yet
/// (Janus says "no such feed" until its PeerConnection is) is asked for
/// again, every 200 ms for 5 s. On failure the handle is detached.
pub fn subscribe(
    session: &Session,
    room: u64,
    feeds: &[u64],
    bind_ip: IpAddr,
    cfg: ParticipantConfig,
) -> Result<Subscriber, JoinError> {
    if feeds.is_empty() {
        return Err(JoinError::local("subscribe: no feeds"));
    }
    let handle = session.attach()?;
    let steps = || -> Result<Subscriber, JoinError> {
        let body = json!({"request": "join", "ptype": "subscriber", "room": room,
            "streams": streams_of(feeds)});
        let (_, jsep) = request_feeds(session, handle, &body, "join as subscriber")?;
        let offer = sdp_of(jsep.as_ref(), "offer", "join as subscriber")?;
        let (socket, local) = bind(bind_ip)?;
        let (participant, answer) = Participant::answer(cfg, local, Instant::now(), &offer)
            .map_err(|e| JoinError::local(format!("{e}; offer was: {offer}")))?;
        start(session, handle, &answer)?;
        Ok(Subscriber {
            participant: Box::new(participant),
            socket,
            handle,
            offer,
        })
    };
    steps().inspect_err(|_| {
        let _ = session.detach(handle);
    })
}

fn streams_of(feeds: &[u64]) -> Vec<Value> {
    feeds.iter().map(|f| json!({"feed": f})).collect()
}

/// A request naming feeds, asked again (every 200 ms, [`FEED_TRIES`] times)
/// while Janus says "no such feed" (a publisher whose PeerConnection is not
/// up yet).
fn request_feeds(
    session: &Session,
    handle: u64,
    body: &Value,
    what: &str,
) -> Result<(Value, Option<Value>), JoinError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match session.request_async(handle, body.clone(), None, what) {
            Ok(r) => return Ok(r),
            Err(e) if tries < FEED_TRIES && is_videoroom_error(&e, NO_SUCH_FEED) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `{"request":"start"}` with our answer; waits for Janus's event.
fn start(session: &Session, handle: u64, answer: &str) -> Result<(), JoinError> {
    session
        .request_async(
            handle,
            json!({"request": "start"}),
            Some(json!({"type": "answer", "sdp": answer, "trickle": false})),
            "start",
        )
        .map(|_| ())
}

/// Add `feeds` (every stream of each) to the subscription on `handle`
/// (made by [`subscribe`] on `session`): `{"request":"subscribe"}`, then
/// Janus's `updated` offer goes to `answer` (which applies it to the
/// subscription's participant, e.g. through the driver's
/// [`crate::driver::Command::Offer`], and returns the SDP answer) and the
/// answer back with `{"request":"start"}`. Feeds not up yet are asked for
/// again as in [`subscribe`]. One call at a time per handle (Janus
/// renegotiates one offer at a time). On failure the subscription keeps
/// what it had, as far as Janus lets it.
pub fn subscribe_more(
    session: &Session,
    handle: u64,
    feeds: &[u64],
    answer: impl FnOnce(&str) -> Result<String, JoinError>,
) -> Result<(), JoinError> {
    if feeds.is_empty() {
        return Err(JoinError::local("subscribe more: no feeds"));
    }
    let what = "subscribe more";
    let body = json!({"request": "subscribe", "streams": streams_of(feeds)});
    let (data, jsep) = request_feeds(session, handle, &body, what)?;
    if data.get("videoroom").and_then(Value::as_str) != Some("updated") {
        return Err(bad(format!("{what}: expected an updated event"), &data));
    }
    let offer = sdp_of(jsep.as_ref(), "offer", what)?;
    let sdp = answer(&offer)?;
    start(session, handle, &sdp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_ids_are_stable_nonzero_and_json_safe() {
        let a = room_id("bench-1-r0");
        assert_eq!(a, room_id("bench-1-r0"));
        assert_ne!(a, room_id("bench-1-r1"));
        assert!(a > 0 && a < (1 << 53));
    }

    #[test]
    fn videoroom_errors_are_join_errors() {
        let r = json!({"janus": "success", "plugindata": {"plugin": PLUGIN,
            "data": {"videoroom": "event", "error_code": 427, "error": "Room 1 already exists"}}});
        assert!(plugin_data(&r, "create", Some(ROOM_EXISTS)).is_ok());
        let e = plugin_data(&r, "create", None).unwrap_err();
        assert!(is_videoroom_error(&e, ROOM_EXISTS), "{}", e.body);
        assert!(!is_videoroom_error(&e, NO_SUCH_FEED), "{}", e.body);
        assert!(plugin_data(&json!({"janus": "success"}), "x", None).is_err());
        assert!(sdp_of(None, "offer", "x").is_err());
        assert!(sdp_of(Some(&json!({"type": "answer", "sdp": "v=0"})), "offer", "x").is_err());
        assert_eq!(
            sdp_of(Some(&json!({"type": "offer", "sdp": "v=0"})), "offer", "x").unwrap(),
            "v=0"
        );
    }

    #[test]
    fn no_server_is_an_error_not_a_panic() {
        let e = Session::create("http://127.0.0.1:9/janus").unwrap_err();
        assert_eq!(e.status, None);
    }

    #[test]
    fn subscribe_more_without_server_is_an_error() {
        let s = Session {
            url: "http://127.0.0.1:9/janus".into(),
            id: 1,
        };
        let mut asked = false;
        assert!(subscribe_more(&s, 2, &[], |_| Ok(String::new())).is_err());
        let e = subscribe_more(&s, 2, &[3], |_| {
            asked = true;
            Ok(String::new())
        })
        .unwrap_err();
        assert_eq!(e.status, None);
        assert!(!asked, "no offer, no answer");
    }
}
