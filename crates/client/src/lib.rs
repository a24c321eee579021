//! Virtual WebRTC participants for corelay's participant API.
//!
//! Each participant is a real WebRTC client (str0m, full ICE as the
//! controlling agent, DTLS, SRTP, SCTP data channel) that joins a room over
//! HTTP, publishes synthetic but verifiable media at real time and checks
//! everything it receives.
//!
//! ```no_run
//! let mut spec = corelay_client::JoinSpec::new("http://127.0.0.1:7070", "r1", "alice");
//! spec.participant.video_slots = 3;
//! let p = corelay_client::join(spec)?;
//! std::thread::sleep(std::time::Duration::from_secs(2));
//! println!("{:?}", p.snapshot().slots);
//! p.leave()?;
//! # Ok::<(), corelay_client::JoinError>(())
//! ```
//!
//! Layers: [`payload`] (stamps), [`media`] (schedules), [`simulcast`]
//! (rids and the SFU's layer messages), [`shaper`] (an emulated downlink
//! bottleneck), [`participant`]
//! (sans-I/O str0m wrapper: time only from its caller, through a
//! [`clock::Clock`] mapping), [`driver`] (epoll thread driving many
//! participants, publishing their snapshots), [`signal`] (the HTTP dialect),
//! [`janus`] (Janus's VideoRoom API: one publishing and one receive-only
//! participant per identity).

// Nested `if let` reads better than long let-chains here (same choice as str0m).
#![allow(clippy::collapsible_if, clippy::collapsible_match)]

pub mod clock;
pub mod driver;
pub mod fastpath;
pub mod janus;
pub mod media;
pub mod participant;
pub mod payload;
pub mod shaper;
pub mod signal;
pub mod simulcast;
pub mod stats;
pub mod stun;
pub mod svc;
pub mod turn;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use clock::Clock;
pub use driver::{Command, Driver};
pub use media::{Recording, VideoSource};
pub use participant::{Participant, ParticipantConfig, VideoCodec};
pub use signal::{JoinError, mint_token};
pub use stats::{
    FREEZE_NS, Kind, NoObserver, Observer, RECEPTION_GAP_NS, Received, Reception, SlotStats,
    Snapshot,
};
pub use svc::Svc;

/// What to join and how to behave: where (server, room, local address,
/// token) plus the participant itself ([`ParticipantConfig`]: name, tracks,
/// slots, codec, media).
#[derive(Debug, Clone)]
pub struct JoinSpec {
    /// Base URL of the server, e.g. `http://127.0.0.1:7070`.
    pub url: String,
    /// Room name.
    pub room: String,
    /// Address for the participant's UDP socket (port chosen by the OS).
    pub bind_ip: IpAddr,
    /// Access token sent as `Authorization: Bearer` on the join and the
    /// leave (servers run with `--auth-secret`; see [`mint_token`]).
    pub token: Option<String>,
    /// The participant: publish video and audio, 3 video + 3 audio slots,
    /// data channel, H.264 unless changed.
    pub participant: ParticipantConfig,
}

impl JoinSpec {
    /// Publish video and audio, 3 video + 3 audio slots, data channel, H.264, 127.0.0.1.
    pub fn new(url: impl Into<String>, room: impl Into<String>, name: impl Into<String>) -> Self {
        JoinSpec {
            url: url.into(),
            room: room.into(),
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            token: None,
            participant: ParticipantConfig::new(name),
        }
    }
}

/// A participant that has joined (answer applied) but is not driven yet:
/// hand it to a [`Driver`] with [`Command::Add`].
pub struct Connected {
    /// The participant.
    pub participant: Box<Participant>,
    /// Its socket; `None` for one at an address on a driver's shared
    /// socket ([`connect_shared`]).
    pub socket: Option<UdpSocket>,
    /// The server's answer details.
    pub joined: signal::Joined,
    /// CLOCK_MONOTONIC ns just before the POST.
    pub post_ns: u64,
    /// The SDP offer that was POSTed.
    pub offer: String,
}

/// Bind a socket, build the offer, POST it and apply the answer.
pub fn connect(
    url: &str,
    room: &str,
    bind_ip: IpAddr,
    cfg: ParticipantConfig,
) -> Result<Connected, JoinError> {
    connect_auth(url, room, bind_ip, cfg, None)
}

/// [`connect`] with an optional bearer token.
pub fn connect_auth(
    url: &str,
    room: &str,
    bind_ip: IpAddr,
    cfg: ParticipantConfig,
    token: Option<&str>,
) -> Result<Connected, JoinError> {
    let socket = UdpSocket::bind(SocketAddr::new(bind_ip, 0))
        .map_err(|e| JoinError::local(format!("bind {bind_ip}:0: {e}")))?;
    let local = socket
        .local_addr()
        .map_err(|e| JoinError::local(format!("local_addr: {e}")))?;
    negotiate(url, room, local, Some(socket), cfg, token)
}

/// [`connect_auth`] through a TURN relay: allocate one on `turn` from
/// the participant's socket (before the offer, as a browser gathers its
/// relay candidate), join, then install a permission for the server's
/// media address (the answer's UDP candidate) and bind a channel to it.
/// Hand the result to a driver with [`Command::AddRelayed`]: what the
/// participant sends then reaches the server from coturn's relayed address.
pub fn connect_relayed(
    url: &str,
    room: &str,
    bind_ip: IpAddr,
    cfg: ParticipantConfig,
    token: Option<&str>,
    turn: &turn::TurnServer,
) -> Result<(Connected, Box<turn::Relay>), JoinError> {
    let socket = UdpSocket::bind(SocketAddr::new(bind_ip, 0))
        .map_err(|e| JoinError::local(format!("bind {bind_ip}:0: {e}")))?;
    let mut relay = turn::Relay::allocate(&socket, turn)
        .map_err(|e| JoinError::local(format!("TURN allocate on {}: {e}", turn.addr)))?;
    let local = socket
        .local_addr()
        .map_err(|e| JoinError::local(format!("local_addr: {e}")))?;
    let c = negotiate(url, room, local, Some(socket), cfg, token)?;
    let bound = match (turn::udp_candidate(&c.joined.answer), &c.socket) {
        (Some(peer), Some(sock)) => relay.bind(sock, peer),
        _ => Err("the answer has no UDP candidate to relay to".into()),
    };
    if let Err(e) = bound {
        let _ = signal::delete_auth(url, &c.joined.location, token);
        return Err(JoinError::local(format!("TURN: {e}")));
    }
    // The driver's socket is non-blocking; the relay's set-up was not.
    if let Some(s) = &c.socket {
        let _ = s.set_read_timeout(None);
    }
    Ok((c, Box::new(relay)))
}

/// [`connect_auth`] for a participant on `driver`'s shared socket
/// ([`Driver::spawn_shared`]): no socket of its own, an address of its own
/// on the driver's. Add it to that driver with `socket: None`.
pub fn connect_shared(
    url: &str,
    room: &str,
    driver: &Driver,
    cfg: ParticipantConfig,
    token: Option<&str>,
) -> Result<Connected, JoinError> {
    let local = driver
        .shared_local()
        .ok_or_else(|| JoinError::local("the driver has no shared socket address left"))?;
    negotiate(url, room, local, None, cfg, token)
}

/// Build the offer at `local`, POST it and apply the answer.
fn negotiate(
    url: &str,
    room: &str,
    local: SocketAddr,
    socket: Option<UdpSocket>,
    cfg: ParticipantConfig,
    token: Option<&str>,
) -> Result<Connected, JoinError> {
    let name = cfg.name.clone();
    let (mut participant, offer) =
        Participant::new(cfg, local, Instant::now()).map_err(JoinError::local)?;
    let post_ns = clock::mono_ns();
    let joined = signal::post_offer_auth(url, room, &name, &offer, token)?;
    if let Err(e) = participant.accept_answer(&joined.answer) {
        // The server created a participant we cannot use: remove it again.
        let _ = signal::delete_auth(url, &joined.location, token);
        return Err(JoinError {
            status: Some(201),
            body: format!("{e}; answer was: {}", joined.answer),
            retry_after: None,
        });
    }
    Ok(Connected {
        participant: Box::new(participant),
        socket,
        joined,
        post_ns,
        offer,
    })
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A joined participant being driven by a thread.
pub struct ParticipantHandle {
    id: String,
    offer: String,
    answer: String,
    location: String,
    etag: String,
    url: String,
    token: Option<String>,
    local: SocketAddr,
    key: u64,
    shared: Arc<Mutex<Snapshot>>,
    driver: Arc<Driver>,
}

/// POST an offer, apply the answer, and start a thread driving the participant.
pub fn join(spec: JoinSpec) -> Result<ParticipantHandle, JoinError> {
    let driver = Driver::spawn(
        &format!("p-{}", spec.participant.name),
        Box::new(NoObserver),
        None,
    )
    .map_err(|e| JoinError::local(format!("driver thread: {e}")))?;
    join_on(&Arc::new(driver), spec)
}

/// Like [`join`], but driven by an existing (shared) driver thread.
pub fn join_on(driver: &Arc<Driver>, spec: JoinSpec) -> Result<ParticipantHandle, JoinError> {
    let token = spec.token.as_deref();
    let c = connect_auth(&spec.url, &spec.room, spec.bind_ip, spec.participant, token)?;
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let shared = c.participant.shared();
    let local = c.participant.local_addr();
    if !driver.send(Command::Add {
        id: key,
        participant: c.participant,
        socket: c.socket,
    }) {
        let _ = signal::delete_auth(&spec.url, &c.joined.location, token);
        return Err(JoinError::local("driver thread is gone"));
    }
    Ok(ParticipantHandle {
        id: c.joined.id,
        offer: c.offer,
        answer: c.joined.answer,
        location: c.joined.location,
        etag: c.joined.etag,
        url: spec.url,
        token: spec.token,
        local,
        key,
        shared,
        driver: driver.clone(),
    })
}

impl ParticipantHandle {
    /// The participant's public id (as rosters and slot events name it).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The SDP offer it joined with.
    pub fn offer(&self) -> &str {
        &self.offer
    }

    /// The SDP answer it joined with.
    pub fn answer(&self) -> &str {
        &self.answer
    }

    /// Start an ICE restart: the new SDP offer (new ICE credentials) to
    /// send to the server ([`Participant::restart_ice`]).
    pub fn restart_ice(&self) -> Result<String, String> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if !self.driver.send(Command::RestartIce(self.key, tx)) {
            return Err("the driver thread is gone".into());
        }
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the participant is gone".to_string())?
    }

    /// Send from a new UDP port from now on (same IP), as a NAT rebinding
    /// does ([`Command::Rebind`]); the participant's ICE session does not
    /// change. Returns the new address.
    pub fn rebind(&self) -> Result<SocketAddr, String> {
        self.rebind_to(self.local.ip())
    }

    /// [`rebind`](Self::rebind) to a new port on `ip` (a move to another
    /// network: on loopback, 127.0.0.2 for one at 127.0.0.1).
    pub fn rebind_to(&self, ip: IpAddr) -> Result<SocketAddr, String> {
        let sock =
            std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(|e| format!("bind: {e}"))?;
        let addr = sock.local_addr().map_err(|e| format!("local_addr: {e}"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if !self.driver.send(Command::Rebind(self.key, sock, tx)) {
            return Err("the driver thread is gone".into());
        }
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(true) => Ok(addr),
            _ => Err("the participant could not be moved (gone, or on a shared socket)".into()),
        }
    }

    /// Apply the server's answer to the offer of [`Self::restart_ice`].
    pub fn accept_answer(&self, sdp: &str) -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if !self
            .driver
            .send(Command::Answer(self.key, sdp.to_string(), tx))
        {
            return Err("the driver thread is gone".into());
        }
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the participant is gone".to_string())?
    }

    /// `Location` as the server sent it (made absolute when the join was
    /// redirected to another node).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// `ETag` as the server sent it.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The participant's UDP socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A copy of everything received so far: asks the driver to publish
    /// the participant's snapshot and waits for it (at most a second; a
    /// participant no longer driven returns its last published copy).
    pub fn snapshot(&self) -> Snapshot {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self.driver.send(Command::Publish(self.key, tx)) {
            let _ = rx.recv_timeout(Duration::from_secs(1));
        }
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Poll the snapshot every 20 ms until `pred` holds or `timeout` passes;
    /// returns the last snapshot and whether `pred` held.
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&Snapshot) -> bool,
    ) -> (bool, Snapshot) {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.snapshot();
            if pred(&s) {
                return (true, s);
            }
            if Instant::now() >= deadline {
                return (false, s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send a text message on the data channel (queued until it opens).
    pub fn send_event(&self, json: &str) {
        self.driver.send(Command::Event(self.key, json.to_string()));
    }

    /// Send arbitrary bytes from this participant's UDP socket to the
    /// server's media address (dropped if that is not known yet).
    pub fn send_raw(&self, bytes: Vec<u8>) {
        self.driver.send(Command::Raw(self.key, bytes));
    }

    /// Speech on/off (audio level and voice activity).
    pub fn set_speaking(&self, speaking: bool) {
        self.driver.send(Command::Speaking(self.key, speaking));
    }

    /// Opus DTX on/off.
    pub fn set_dtx(&self, dtx: bool) {
        self.driver.send(Command::Dtx(self.key, dtx));
    }

    /// Send a keyframe with the next video frame.
    pub fn force_keyframe(&self) {
        self.driver.send(Command::Keyframe(self.key));
    }

    /// Stop driving the participant without telling the server (simulates a
    /// participant that vanished; the server should time it out).
    pub fn vanish(self) {
        self.driver.send(Command::Remove(self.key));
    }

    /// `DELETE` the participant, then stop driving it.
    pub fn leave(self) -> Result<(), JoinError> {
        let r = signal::delete_auth(&self.url, &self.location, self.token.as_deref());
        self.driver.send(Command::Remove(self.key));
        r
    }
}

impl Drop for ParticipantHandle {
    fn drop(&mut self) {
        // Stop media; the Driver thread ends when its last handle is dropped.
        self.driver.send(Command::Remove(self.key));
    }
}
