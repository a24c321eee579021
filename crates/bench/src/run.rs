//! The runner: driver threads (one per client core) carrying the
//! participants, a small pool of joiner threads doing HTTP, and the main
//! thread that follows the plan, samples CPU once a second, prints progress
//! and finally writes the report.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_client::driver::{Command, Driver};
use corelay_client::janus;
use corelay_client::{
    JoinError, ParticipantConfig, Recording, Snapshot, VideoCodec, VideoSource, clock, signal,
};

use crate::metrics::{NodeMap, Report, Series, ThreadObserver};
use crate::scenario::Plan;
use crate::util::{ProcCpu, read_proc_cpu};

/// Which signaling the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// corelay's participant API (docs/api.md): one PeerConnection each.
    Corelay,
    /// Janus's VideoRoom over its HTTP API: a publishing and a
    /// subscribing PeerConnection each ([`corelay_client::janus`]).
    Janus,
}

/// Driver key of a Janus participant's subscription (its publisher's is the tag).
const SUB_KEY: u64 = 1 << 62;

/// Options shared by every scenario.
#[derive(Debug, Clone)]
pub struct Common {
    /// Server base URL (the Janus API root with `Dialect::Janus`): the
    /// first of `urls`.
    pub url: String,
    /// Every node's base URL (one unless a cluster): participant k joins
    /// through `urls[k % len]` (by its tag), so that rooms span nodes.
    pub urls: Vec<String>,
    /// The server's signaling dialect.
    pub dialect: Dialect,
    /// Output directory.
    pub out: PathBuf,
    /// Client driver threads.
    pub threads: usize,
    /// Server process ids (a cluster's nodes), for CPU readings: summed.
    pub server_pids: Vec<u32>,
    /// Frame file to replay (None: synthetic 400 kbps).
    pub media: Option<PathBuf>,
    /// Pin driver thread i to CPU pin[i % len].
    pub pin: Vec<usize>,
    /// HTTP joiner threads.
    pub joiners: usize,
    /// Video codec to offer.
    pub codec: VideoCodec,
    /// Local address for participant sockets.
    pub bind_ip: IpAddr,
    /// Poll the server's /api/v1/stats once per second.
    pub server_stats: bool,
    /// Seed.
    pub seed: u64,
    /// Print the progress line.
    pub progress: bool,
    /// The server's `--auth-secret`: joins, leaves and stats polls carry tokens.
    pub auth_secret: Option<Vec<u8>>,
    /// Simulcast and downlink-limit settings.
    pub layers: Layers,
    /// Participants use their own media path once connected
    /// ([`ParticipantConfig::own_media_path`]).
    pub own_media_path: bool,
    /// Participants negotiate TWCC ([`ParticipantConfig::twcc`]).
    pub twcc: bool,
    /// Participants join on their driver thread's shared socket, each at a
    /// loopback address of its own ([`Driver::spawn_shared`]), instead of
    /// with a socket each.
    pub shared_socket: bool,
    /// TURN-relayed participants and the network change (issue 50).
    pub reach: crate::reach::ReachOpts,
}

/// `--simulcast`, `--downlink-limit`, `--limited-share`.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    /// Publish three simulcast layers: these frame files for q, h, f (empty
    /// with `simulcast`: synthetic 150/400/1500 kbps).
    pub simulcast: bool,
    /// Frame files of the layers, low to high.
    pub media: Vec<PathBuf>,
    /// The bottleneck's rate, bits per second.
    pub downlink_limit_bps: Option<u64>,
    /// Share of subscribers behind it.
    pub limited_share: f64,
    /// `--svc`: publish video as one VP9 SVC stream of these layers
    /// (synthetic: 1 500 kbps split 1:3:9 over three spatial layers).
    pub svc: Option<corelay_client::Svc>,
}

impl Layers {
    /// Whether summary.json gets a `simulcast` object.
    pub fn reported(&self) -> bool {
        self.simulcast || self.downlink_limit_bps.is_some()
    }
}

impl Common {
    /// A token for `identity` in `room` (None without a secret); an admin
    /// token when `room` is None.
    fn token(&self, room: Option<&str>, identity: &str, ttl: Duration) -> Option<String> {
        let secret = self.auth_secret.as_deref()?;
        let r = match room {
            Some(room) => signal::mint_token(secret, room, identity, ttl),
            None => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                signal::mint_claims(
                    secret,
                    &serde_json::json!({"sub": identity, "admin": true, "iat": now,
                        "exp": now.saturating_add(ttl.as_secs())}),
                )
            }
        };
        match r {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("corelay-bench: {e}");
                None
            }
        }
    }
}

/// Per-participant media options the scenario decides.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Publish video.
    pub video: bool,
    /// Publish audio.
    pub audio: bool,
    /// recvonly video m-lines.
    pub video_slots: usize,
    /// recvonly audio m-lines.
    pub audio_slots: usize,
    /// Use DTX while silent.
    pub dtx: bool,
}

/// What happened to one participant.
pub struct Joined {
    /// Tag.
    pub tag: u64,
    /// Room index.
    pub room: usize,
    /// Member index.
    pub member: usize,
    /// Name.
    pub name: String,
    /// Location to DELETE.
    pub location: String,
    /// Its access token (for the DELETE).
    pub token: Option<String>,
    /// Driver index.
    pub driver: usize,
    /// Index in `Common::urls` of the node it is on (None: redirected to
    /// a node the bench was not given).
    pub node: Option<usize>,
    /// Shared snapshot.
    pub shared: Arc<Mutex<Snapshot>>,
    /// When it was POSTed (mono ns).
    pub post_ns: u64,
    /// When the POST finished (mono ns).
    pub answered_ns: u64,
    /// Current speaking state.
    pub speaking: bool,
    /// Receives through the emulated downlink bottleneck.
    pub limited: bool,
    /// Its video slots' counters when the measurement window began (None:
    /// it joined later).
    pub window_marks: Option<BTreeMap<String, crate::simulcast::VideoMark>>,
    /// The Janus side (None with the corelay dialect).
    pub janus: Option<JanusPeer>,
}

/// A Janus participant's session: the publisher (driver key = tag) and,
/// once it is up and another publisher of its room is, the subscription
/// (driver key = tag | SUB_KEY), to which later publishers are added.
pub struct JanusPeer {
    /// The session both handles live on.
    pub session: janus::Session,
    /// Room number.
    pub room: u64,
    /// Our feed id.
    pub feed: u64,
    /// Publisher handle.
    pub pub_handle: u64,
    /// Subscriber handle, once subscribed.
    pub sub_handle: Option<u64>,
    /// The subscription's snapshot, once subscribed.
    pub sub_shared: Option<Arc<Mutex<Snapshot>>>,
    /// Feeds asked for (subscribed, in flight or failed: each is asked once).
    pub sub_feeds: Vec<u64>,
    /// A subscribe (first or more) is in flight: Janus renegotiates one
    /// offer at a time per handle, so the next waits (and takes every feed
    /// that came up meanwhile).
    pub sub_busy: bool,
    /// The first subscribe failed: no subscription, none asked again.
    pub sub_dead: bool,
}

impl Joined {
    /// Its snapshot: with Janus, the publisher's merged with the
    /// subscription's ([`Snapshot::with_subscription`]).
    pub fn snapshot(&self) -> Snapshot {
        let own = self.shared.lock().map(|s| s.clone()).unwrap_or_default();
        match self.janus.as_ref().and_then(|j| j.sub_shared.as_ref()) {
            Some(sub) => match sub.lock() {
                Ok(sub) => own.with_subscription(&sub),
                Err(_) => own,
            },
            None => own,
        }
    }

    /// Connected (with Janus: the publisher, and the subscription once it exists).
    fn connected(&self) -> bool {
        let own = self.shared.lock().map(|s| s.connected).unwrap_or(false);
        let sub = match self.janus.as_ref().and_then(|j| j.sub_shared.as_ref()) {
            Some(sub) => sub.lock().map(|s| s.connected).unwrap_or(false),
            None => true,
        };
        own && sub
    }
}

/// Every driver publishes all its participants' snapshots, and this waits
/// for them (a second each at most: a driver that does not answer leaves
/// copies at most one publish interval old).
fn publish_all(drivers: &[Arc<Driver>]) {
    let acks: Vec<_> = drivers
        .iter()
        .filter_map(|d| {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            d.send(Command::PublishAll(tx)).then_some(rx)
        })
        .collect();
    for rx in acks {
        let _ = rx.recv_timeout(Duration::from_secs(1));
    }
}

enum JobResult {
    Joined(Box<Joined>),
    Failed {
        tag: u64,
        err: JoinError,
    },
    Left {
        ok: bool,
    },
    /// A Janus subscription is up (its participant is on the driver).
    Subscribed {
        tag: u64,
        handle: u64,
        shared: Arc<Mutex<Snapshot>>,
    },
    /// Feeds were added to a Janus subscription (renegotiated).
    Updated {
        tag: u64,
    },
    /// A Janus subscribe (first or more) failed.
    SubFailed {
        tag: u64,
        err: JoinError,
    },
}

enum Job {
    Join {
        plan: crate::scenario::JoinPlan,
        room_name: String,
        cfg: Box<ParticipantConfig>,
        driver: usize,
        token: Option<String>,
        /// Members planned in the room (Janus creates rooms that size).
        room_size: usize,
        /// Index in `Common::urls` of the node to join through.
        node: usize,
    },
    Leave {
        tag: u64,
        location: String,
        /// The node it joined through (a redirected join's location is
        /// absolute already).
        node: usize,
        driver: usize,
        token: Option<String>,
        /// Janus: the session and its handles (instead of the DELETE).
        janus: Option<(janus::Session, Vec<u64>)>,
    },
    /// Janus: subscribe `tag`'s session to these feeds of its room.
    Subscribe {
        tag: u64,
        session: janus::Session,
        room: u64,
        feeds: Vec<u64>,
        cfg: Box<ParticipantConfig>,
        driver: usize,
    },
    /// Janus: add feeds to `tag`'s subscription (handle `handle`).
    SubscribeMore {
        tag: u64,
        session: janus::Session,
        handle: u64,
        feeds: Vec<u64>,
        driver: usize,
    },
    /// Janus: keep these sessions alive.
    Keepalive(Vec<janus::Session>),
}

/// One CPU/stats sample, taken once per second by the main thread.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since start (fractional).
    pub t: f64,
    /// Participants connected at the time.
    pub active: usize,
    /// Server process CPU.
    pub server: Option<ProcCpu>,
    /// Client process CPU.
    pub client: Option<ProcCpu>,
    /// Per driver thread CPU ns.
    pub driver_cpu_ns: Vec<u64>,
    /// Server's own counters: forwarded packets (cumulative).
    pub server_forwarded: Option<u64>,
    /// Server's own busy fraction, max over shards.
    pub server_busy: Option<f64>,
    /// The nodes' relay counters (cumulative, summed over nodes).
    pub server_relay: Option<RelayTotals>,
    /// 1-minute load average of the machine.
    pub loadavg: Option<f64>,
}

/// Everything the report needs.
pub struct Outcome {
    /// The plan that ran.
    pub plan: Plan,
    /// Merged per-second measurements.
    pub series: Series,
    /// Samples (CPU etc.).
    pub samples: Vec<Sample>,
    /// Joined participants and their final snapshots.
    pub joined: Vec<(Joined, Snapshot)>,
    /// Join failures: (tag, HTTP status or None, body).
    pub failures: Vec<(u64, Option<u16>, String)>,
    /// DELETEs that failed.
    pub leave_failures: usize,
    /// Join time per participant: first media − POST, µs.
    pub join_times_us: Vec<u64>,
    /// Signaling time per participant: POST − answer, µs.
    pub signaling_times_us: Vec<u64>,
    /// POST to ICE + DTLS connected, µs.
    pub connect_times_us: Vec<u64>,
    /// Seconds (since start) of the measurement window [from, to).
    pub window: (u64, u64),
    /// CLOCK_MONOTONIC ns at start (second 0 of `window`).
    pub start_ns: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Joins that started more than 1 s late (joiner pool too slow).
    pub late_joins: usize,
    /// Datagrams the client could not send.
    pub client_tx_errors: u64,
    /// Frame file used.
    pub media_desc: String,
    /// Simulcast / downlink-limit settings of the run.
    pub layers: Layers,
    /// CLOCK_MONOTONIC ns when the video counters were marked (window
    /// start) and when the final snapshots were taken: the span the
    /// `simulcast` figures cover (None if the run ended before the window).
    pub marks_span_ns: Option<(u64, u64)>,
    /// Janus: feeds added to existing subscriptions (renegotiations done).
    pub subscription_updates: u64,
    /// Nodes the participants were spread over (`Common::urls`).
    pub nodes: usize,
    /// The reach options of the run.
    pub reach: crate::reach::ReachOpts,
}

fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit pointers.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A cluster's relay counters (`/api/v1/stats` totals), summed over nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayTotals {
    /// Datagrams sent to other nodes.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Datagrams received from other nodes.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
}

/// Forwarded packets, busiest shard and relay counters of one node.
fn node_counters(url: &str, token: Option<&str>) -> Option<(u64, f64, RelayTotals)> {
    let v = signal::get_json_auth(url, "/api/v1/stats", token).ok()?;
    let total = v.get("total")?;
    let fwd = total.get("forwarded")?.as_u64()?;
    let busy = v
        .get("shards")
        .and_then(|s| s.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("busy").and_then(|b| b.as_f64()))
                .fold(0.0, f64::max)
        })
        .unwrap_or(0.0);
    // A node without --cluster has none: zeros.
    let n = |k: &str| total.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    let relay = RelayTotals {
        tx_packets: n("relay_tx_packets"),
        tx_bytes: n("relay_tx_bytes"),
        rx_packets: n("relay_rx_packets"),
        rx_bytes: n("relay_rx_bytes"),
    };
    Some((fwd, busy, relay))
}

/// Every node's counters: forwarded and relay summed, the busiest shard of
/// all. None unless every node answered (a partial sum would read as a drop).
fn server_counters(urls: &[String], token: Option<&str>) -> Option<(u64, f64, RelayTotals)> {
    let mut acc = (0u64, 0.0f64, RelayTotals::default());
    for url in urls {
        let (f, b, r) = node_counters(url, token)?;
        acc.0 += f;
        acc.1 = acc.1.max(b);
        acc.2.tx_packets += r.tx_packets;
        acc.2.tx_bytes += r.tx_bytes;
        acc.2.rx_packets += r.rx_packets;
        acc.2.rx_bytes += r.rx_bytes;
    }
    Some(acc)
}

/// The processes' CPU readings merged into one (times summed, threads of
/// all): None if any is gone, or none was given.
fn servers_cpu(pids: &[u32]) -> Option<ProcCpu> {
    let mut all: Option<ProcCpu> = None;
    for &pid in pids {
        let c = read_proc_cpu(pid)?;
        match &mut all {
            None => all = Some(c),
            Some(a) => {
                a.user += c.user;
                a.sys += c.sys;
                a.threads.extend(c.threads);
            }
        }
    }
    all
}

/// Which of `urls` a joined participant is on: the one it was sent to,
/// unless its join was redirected (then its location is absolute, on the
/// node that took it; None if that is none of `urls`).
pub fn node_of(urls: &[String], sent_to: usize, location: &str) -> Option<usize> {
    if !(location.starts_with("http://") || location.starts_with("https://")) {
        return Some(sent_to);
    }
    urls.iter().position(|u| {
        location
            .strip_prefix(u.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Run a plan to completion.
pub fn run(common: &Common, plan: Plan, shape: Shape) -> Result<Outcome, String> {
    raise_nofile();
    let (video, media_desc) = match &common.media {
        Some(p) => {
            let r = Recording::load(p)?;
            let desc = format!(
                "{} ({} frames, {:.0} kbps RTP payload, looped)",
                p.display(),
                r.frames.len(),
                r.bitrate_bps() / 1000.0
            );
            (VideoSource::Recorded(Arc::new(r)), desc)
        }
        None => (
            VideoSource::default(),
            "synthetic 400 kbps 30 fps, keyframe every 3 s".to_string(),
        ),
    };
    let frames_in_source = match &video {
        VideoSource::Recorded(r) => r.frames.len() as u64,
        VideoSource::Synthetic { .. } => 90,
    };
    let (layer_sources, media_desc) = simulcast_sources(common, media_desc)?;
    // SVC: a synthetic source carries all spatial layers, about what
    // simulcast's top layer sends (150/400/1500 kbps).
    let (video, media_desc) = match (common.layers.svc, &video) {
        (Some(m), VideoSource::Synthetic { .. }) => (
            VideoSource::Synthetic {
                bitrate_bps: 1_500_000,
                fps: 30,
                keyframe_interval: 90,
            },
            format!("VP9 SVC {m}: synthetic 1500 kbps 30 fps split 1:3:9, keyframe every 3 s"),
        ),
        (Some(m), _) => (video, format!("VP9 SVC {m}: {media_desc}")),
        (None, _) => (video, media_desc),
    };
    // The measurement window (from 2 s after the last join to the end), so
    // the video counters can be marked when it begins.
    let window = window_of(&plan);
    let mut marked_ns: Option<u64> = None;

    let start = Instant::now();
    let start_ns = clock::mono_ns();
    // Several nodes: who is where, to split latency by same / cross node.
    let nodes = (common.urls.len() > 1).then(|| {
        Arc::new(NodeMap::new(
            plan.joins.iter().map(|j| (j.tag, j.name.as_str())),
        ))
    });
    // Relayed participants: who they are, to split latency by pair.
    let reach_map = common.reach.reported().then(|| {
        Arc::new(crate::reach::ReachMap::new(
            &common.reach,
            plan.joins.iter().map(|j| (j.tag, j.name.as_str())),
        ))
    });
    let reach_opts = Arc::new(common.reach.clone());
    let mut network_changed = false;
    let (rep_tx, rep_rx) = channel::<Report>();
    let mut drivers = Vec::new();
    for i in 0..common.threads.max(1) {
        let pin = (!common.pin.is_empty()).then(|| common.pin[i % common.pin.len()]);
        let obs = ThreadObserver::new(start, rep_tx.clone())
            .with_nodes(nodes.clone())
            .with_reach(reach_map.clone());
        let name = format!("bench-{i}");
        let d = if common.shared_socket {
            Driver::spawn_shared(&name, Box::new(obs), pin)
        } else {
            Driver::spawn(&name, Box::new(obs), pin)
        }
        .map_err(|e| format!("driver thread: {e}"))?;
        drivers.push(Arc::new(d));
    }
    drop(rep_tx);

    // Joiner pool.
    let (job_tx, job_rx) = channel::<Job>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (res_tx, res_rx) = channel::<JobResult>();
    // Set when the plan ends: queued joins are dropped; set again (to 2)
    // when the teardown deadline passes: queued DELETEs are skipped.
    let phase = Arc::new(AtomicU8::new(0));
    let mut joiners = Vec::new();
    for i in 0..common.joiners.max(1) {
        let rx = job_rx.clone();
        let tx = res_tx.clone();
        let drivers = drivers.clone();
        let urls = common.urls.clone();
        let bind = common.bind_ip;
        let ph = phase.clone();
        let dialect = common.dialect;
        let nodes = nodes.clone();
        let reach = reach_opts.clone();
        let h = std::thread::Builder::new()
            .name(format!("joiner-{i}"))
            .spawn(move || joiner(rx, tx, drivers, urls, nodes, bind, ph, dialect, reach))
            .map_err(|e| format!("joiner thread: {e}"))?;
        joiners.push(h);
    }
    drop(res_tx);

    let run_id = format!(
        "{:x}",
        fastrand::Rng::with_seed(common.seed ^ u64::from(std::process::id())).u32(..)
    );
    // Tokens outlive the run: the leaves come after the plan's end.
    let token_ttl = plan.end + Duration::from_secs(3600);
    let admin_token = common.token(None, &format!("bench-{run_id}"), token_ttl);
    let mut rng = fastrand::Rng::with_seed(common.seed);
    let mut next_join = 0usize;
    let mut joined: HashMap<u64, Joined> = HashMap::new();
    let mut failures = Vec::new();
    let mut series = Series::default();
    let mut samples: Vec<Sample> = Vec::new();
    let mut late_joins = 0usize;
    // Sample just after each second boundary, so every driver thread has
    // reported the second that just ended.
    let mut next_sample = start + Duration::from_millis(150);
    let mut first_media: HashMap<u64, u64> = HashMap::new();
    let mut connected_at: HashMap<u64, u64> = HashMap::new();
    let sizes = plan.room_sizes.clone();
    // Janus: when the subscriptions were last looked at.
    let mut next_sub_check = start;
    let mut subscription_updates = 0u64;
    let mut next_keepalive = start + janus::KEEPALIVE_INTERVAL;
    let sub_cfg = |name: &str, tag: u64, seed: u64| {
        let mut cfg = ParticipantConfig::new(name);
        cfg.codec = common.codec;
        cfg.keep_latency_samples = 0;
        cfg.seed = seed;
        cfg.tag = tag;
        cfg.own_media_path = common.own_media_path;
        cfg.twcc = common.twcc;
        Box::new(cfg)
    };

    let total_planned = plan.joins.len();
    // Main loop: bounded by the plan's end (plus nothing: it exits there).
    loop {
        let now = Instant::now();
        let el = now - start;
        if el >= plan.end {
            break;
        }
        while next_join < plan.joins.len() && plan.joins[next_join].at <= el {
            let jp = plan.joins[next_join].clone();
            next_join += 1;
            if el > jp.at + Duration::from_secs(1) {
                late_joins += 1;
            }
            let mut cfg = ParticipantConfig::new(jp.name.clone());
            cfg.codec = common.codec;
            let publishes = plan.publishes(jp.member);
            cfg.publish_video = shape.video && publishes;
            cfg.publish_audio = shape.audio && publishes;
            cfg.video_slots = shape.video_slots;
            cfg.audio_slots = shape.audio_slots;
            cfg.data_channel = true;
            cfg.video = video.clone();
            cfg.simulcast = layer_sources.clone();
            cfg.svc = common.layers.svc;
            let limited = common.layers.downlink_limit_bps.is_some()
                && crate::simulcast::is_limited(jp.tag, common.layers.limited_share);
            if limited {
                cfg.downlink_limit_bps = common.layers.downlink_limit_bps;
            }
            cfg.video_offset = rng.u64(0..frames_in_source.max(1));
            cfg.dtx = shape.dtx;
            cfg.speaking = match plan.speakers {
                Some(sp) => sp.speaking(jp.member, sizes.get(jp.room).copied().unwrap_or(1), el),
                None => true,
            };
            cfg.keep_latency_samples = 0;
            cfg.seed = rng.u64(..);
            cfg.tag = jp.tag;
            cfg.own_media_path = common.own_media_path;
            cfg.twcc = common.twcc;
            let driver = (jp.tag as usize) % drivers.len();
            let room_name = format!("bench-{run_id}-r{}", jp.room);
            let token = common.token(Some(&room_name), &jp.name, token_ttl);
            let room_size = sizes.get(jp.room).copied().unwrap_or(1);
            let node = (jp.tag as usize) % common.urls.len().max(1);
            let _ = job_tx.send(Job::Join {
                plan: jp,
                room_name,
                cfg: Box::new(cfg),
                driver,
                token,
                room_size,
                node,
            });
        }
        while let Ok(r) = res_rx.try_recv() {
            if matches!(r, JobResult::Updated { .. }) {
                subscription_updates += 1;
            }
            absorb_result(r, &mut joined, &mut failures);
        }
        if common.dialect == Dialect::Janus && now >= next_sub_check {
            next_sub_check = now + Duration::from_millis(50);
            for job in janus_subscriptions(&mut joined, &mut rng, &sub_cfg) {
                let _ = job_tx.send(job);
            }
        }
        if common.dialect == Dialect::Janus {
            if now >= next_keepalive {
                next_keepalive = now + janus::KEEPALIVE_INTERVAL;
                let sessions = joined
                    .values()
                    .filter_map(|j| j.janus.as_ref().map(|p| p.session.clone()))
                    .collect();
                let _ = job_tx.send(Job::Keepalive(sessions));
            }
        }
        if let Some(sp) = plan.speakers {
            for j in joined.values_mut() {
                let want = sp.speaking(j.member, sizes.get(j.room).copied().unwrap_or(1), el);
                if want != j.speaking {
                    j.speaking = want;
                    drivers[j.driver].send(Command::Speaking(j.tag, want));
                }
            }
        }
        if !network_changed && common.reach.change_at.is_some_and(|at| el >= at) {
            // The network change: a share of the participants moves to a
            // new local address (each driver rebinds and checks at once).
            network_changed = true;
            let (moved, errors) = crate::reach::move_participants(
                &common.reach,
                joined.values(),
                &drivers,
                common.bind_ip,
            );
            if common.progress {
                eprintln!(
                    "\nnetwork change at {:.1} s: {moved} participants moved{}",
                    el.as_secs_f64(),
                    if errors.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", errors.join("; "))
                    }
                );
            }
        }
        if marked_ns.is_none() && el.as_secs() >= window.0 {
            // Window start: each subscriber's video counters, as of now.
            publish_all(&drivers);
            marked_ns = Some(clock::mono_ns());
            for j in joined.values_mut() {
                j.window_marks = Some(crate::simulcast::marks(&j.snapshot()));
            }
        }
        if now >= next_sample {
            next_sample += Duration::from_secs(1);
            while let Ok(r) = rep_rx.try_recv() {
                absorb(&r, &mut first_media, &mut connected_at, &mut series);
            }
            let active = joined.values().filter(|j| j.connected()).count();
            let (fwd, busy, relay) = match common
                .server_stats
                .then(|| server_counters(&common.urls, admin_token.as_deref()))
                .flatten()
            {
                Some((f, b, r)) => (Some(f), Some(b), Some(r)),
                None => (None, None, None),
            };
            let s = Sample {
                // Stamped as /proc is read, after the server's counters: a
                // stalled server answers late, and a stamp taken before the
                // call made the CPU read after it look like more than a
                // core per thread (a round at 2.5 cores, 2026-12-06).
                t: start.elapsed().as_secs_f64(),
                active,
                server: servers_cpu(&common.server_pids),
                client: read_proc_cpu(std::process::id()),
                driver_cpu_ns: drivers
                    .iter()
                    .map(|d| d.stats().cpu_ns.load(Ordering::Relaxed))
                    .collect(),
                server_forwarded: fwd,
                server_busy: busy,
                server_relay: relay,
                loadavg: crate::util::loadavg1(),
            };
            if common.progress {
                progress_line(
                    &plan,
                    &series,
                    &samples,
                    &s,
                    joined.len(),
                    failures.len(),
                    total_planned,
                );
            }
            samples.push(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let end_el = start.elapsed();
    phase.store(1, Ordering::Relaxed);

    // Final snapshots, then leave (DELETE) in parallel on the joiner pool.
    while let Ok(r) = res_rx.try_recv() {
        absorb_result(r, &mut joined, &mut failures);
    }
    publish_all(&drivers);
    let finals_ns = clock::mono_ns();
    let mut finals = Vec::new();
    for (_, j) in joined.drain() {
        let snap = j.snapshot();
        finals.push((j, snap));
    }
    finals.sort_by_key(|(j, _)| j.tag);
    let mut pending = 0usize;
    for (j, _) in &finals {
        if job_tx
            .send(Job::Leave {
                tag: j.tag,
                location: j.location.clone(),
                node: j.node.unwrap_or(0),
                driver: j.driver,
                token: j.token.clone(),
                janus: j.janus.as_ref().map(|p| {
                    let handles = std::iter::once(p.pub_handle).chain(p.sub_handle).collect();
                    (p.session.clone(), handles)
                }),
            })
            .is_ok()
        {
            pending += 1;
        }
    }
    drop(job_tx);
    let mut leave_failures = 0usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    // Joins still in flight may also report; count only Left results.
    while pending > 0 && Instant::now() < deadline {
        match res_rx.recv_timeout(Duration::from_millis(200)) {
            Ok(JobResult::Left { ok, .. }) => {
                pending -= 1;
                if !ok {
                    leave_failures += 1;
                }
            }
            Ok(JobResult::Joined(j)) => {
                // Joined after the end: leave it right away.
                match &j.janus {
                    Some(p) => {
                        let _ = p.session.leave(&[p.pub_handle]);
                    }
                    None => {
                        let url = &common.urls[j.node.unwrap_or(0) % common.urls.len().max(1)];
                        let _ = signal::delete_auth(url, &j.location, j.token.as_deref());
                    }
                }
                drivers[j.driver].send(Command::Remove(j.tag));
            }
            Ok(JobResult::Subscribed { tag, .. }) => {
                // Its session is being destroyed by its Leave.
                for d in &drivers {
                    d.send(Command::Remove(tag | SUB_KEY));
                }
            }
            // Leaving destroys the sessions under a subscribe still in
            // flight: not a failure of the run.
            Ok(JobResult::Updated { .. } | JobResult::SubFailed { .. }) => {}
            Ok(JobResult::Failed { tag, err }) => failures.push((tag, err.status, err.body)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    leave_failures += pending;
    phase.store(2, Ordering::Relaxed);
    for h in joiners {
        let _ = h.join();
    }
    let client_tx_errors = drivers
        .iter()
        .map(|d| d.stats().tx_errors.load(Ordering::Relaxed))
        .sum();
    drop(drivers); // shuts the threads down (they flush a last report on tick only)
    for r in rep_rx.try_iter() {
        absorb(&r, &mut first_media, &mut connected_at, &mut series);
    }

    let signaling_times_us = finals
        .iter()
        .map(|(j, _)| j.answered_ns.saturating_sub(j.post_ns) / 1000)
        .collect();
    let connect_times_us = finals
        .iter()
        .filter_map(|(j, _)| {
            connected_at
                .get(&j.tag)
                .map(|ns| ns.saturating_sub(j.post_ns) / 1000)
        })
        .collect();
    // Join time: POST to first media. A participant can only receive once
    // another member of its room is connected, so the clock starts at the
    // later of its own POST and the first other member's connect.
    let mut connects_by_room: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for (j, _) in &finals {
        if let Some(&c) = connected_at.get(&j.tag) {
            connects_by_room.entry(j.room).or_default().push((c, j.tag));
        }
    }
    let mut join_times_us = Vec::new();
    for (j, _) in &finals {
        let Some(&got) = first_media.get(&j.tag) else {
            continue;
        };
        let other = connects_by_room
            .get(&j.room)
            .and_then(|v| v.iter().filter(|(_, t)| *t != j.tag).map(|(c, _)| *c).min());
        let from = other.map_or(j.post_ns, |o| o.max(j.post_ns));
        join_times_us.push(got.saturating_sub(from) / 1000);
    }
    Ok(Outcome {
        plan,
        series,
        samples,
        joined: finals,
        failures,
        leave_failures,
        join_times_us,
        signaling_times_us,
        connect_times_us,
        window,
        start_ns,
        elapsed: end_el,
        late_joins,
        client_tx_errors,
        media_desc,
        layers: common.layers.clone(),
        marks_span_ns: marked_ns.map(|m| (m, finals_ns)),
        subscription_updates,
        nodes: common.urls.len(),
        reach: common.reach.clone(),
    })
}

/// Measurement window in seconds since start: from 2 s after the last join
/// to the end (the whole run when that leaves less than 2 s).
fn window_of(plan: &Plan) -> (u64, u64) {
    let from = (plan.last_join.as_secs_f64().ceil() as u64) + 2;
    let to = plan.end.as_secs();
    if to > from + 1 {
        (from, to)
    } else {
        (0, to.max(1))
    }
}

/// The simulcast layers' sources (empty without `--simulcast`) and the
/// media description with them added.
fn simulcast_sources(common: &Common, desc: String) -> Result<(Vec<VideoSource>, String), String> {
    if !common.layers.simulcast {
        return Ok((Vec::new(), desc));
    }
    if common.layers.media.is_empty() || common.media.is_none() {
        let kbps = [150u32, 400, 1500];
        let v = kbps
            .iter()
            .map(|&k| VideoSource::Synthetic {
                bitrate_bps: k * 1000,
                fps: 30,
                keyframe_interval: 90,
            })
            .collect();
        return Ok((
            v,
            "simulcast q/h/f: synthetic 150/400/1500 kbps 30 fps, keyframe every 3 s".into(),
        ));
    }
    let mut v = Vec::new();
    let mut parts = Vec::new();
    for (p, rid) in common
        .layers
        .media
        .iter()
        .zip(corelay_client::simulcast::RIDS)
    {
        let r = Recording::load(p)?;
        parts.push(format!(
            "{rid}: {} ({} frames, {:.0} kbps)",
            p.display(),
            r.frames.len(),
            r.bitrate_bps() / 1000.0
        ));
        v.push(VideoSource::Recorded(Arc::new(r)));
    }
    Ok((v, format!("simulcast {}", parts.join("; "))))
}

#[allow(clippy::too_many_arguments)]
fn joiner(
    rx: Arc<Mutex<Receiver<Job>>>,
    tx: Sender<JobResult>,
    drivers: Vec<Arc<Driver>>,
    urls: Vec<String>,
    nodes: Option<Arc<NodeMap>>,
    bind: IpAddr,
    phase: Arc<AtomicU8>,
    dialect: Dialect,
    reach: Arc<crate::reach::ReachOpts>,
) {
    let url_of = |node: usize| urls[node % urls.len().max(1)].as_str();
    loop {
        let job = {
            let Ok(g) = rx.lock() else { return };
            match g.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        match job {
            Job::Join {
                plan,
                room_name,
                cfg,
                driver,
                token,
                room_size,
                node,
            } => {
                let url = url_of(node);
                if phase.load(Ordering::Relaxed) >= 1 {
                    // The run is over: do not join any more.
                    continue;
                }
                if dialect == Dialect::Janus {
                    let Some(d) = drivers.get(driver) else { return };
                    let r = janus_publish(url, &room_name, room_size, bind, *cfg, &plan, driver, d);
                    let _ = tx.send(match r {
                        Ok(j) => JobResult::Joined(Box::new(j)),
                        Err(err) => JobResult::Failed { tag: plan.tag, err },
                    });
                    continue;
                }
                let speaking = cfg.speaking;
                let limited = cfg.downlink_limit_bps.is_some();
                let post_ns = clock::mono_ns();
                let Some(d) = drivers.get(driver) else { return };
                let token_ref = token.as_deref();
                // A relayed participant allocates its relay from a socket
                // of its own, and one that will move needs one to move from.
                let turn = reach
                    .relayed(plan.tag)
                    .then(|| reach.turn_for(&plan.name))
                    .flatten();
                let connected = match turn {
                    Some(Err(e)) => Err(JoinError::local(e)),
                    Some(Ok(turn)) => corelay_client::connect_relayed(
                        url, &room_name, bind, *cfg, token_ref, &turn,
                    )
                    .map(|(c, r)| (c, Some(r))),
                    None if d.has_shared() && !reach.own_socket(plan.tag) => {
                        corelay_client::connect_shared(url, &room_name, d, *cfg, token_ref)
                            .map(|c| (c, None))
                    }
                    None => corelay_client::connect_auth(url, &room_name, bind, *cfg, token_ref)
                        .map(|c| (c, None)),
                };
                match connected {
                    Ok((c, relay)) => {
                        let shared = c.participant.shared();
                        let answered_ns = clock::mono_ns();
                        let on = node_of(&urls, node, &c.joined.location);
                        // Known before its first frame arrives.
                        if let Some(m) = &nodes {
                            m.set(plan.tag, on);
                        }
                        match (relay, c.socket) {
                            (Some(relay), Some(socket)) => d.send(Command::AddRelayed {
                                id: plan.tag,
                                participant: c.participant,
                                socket,
                                relay,
                            }),
                            (_, socket) => d.send(Command::Add {
                                id: plan.tag,
                                participant: c.participant,
                                socket,
                            }),
                        };
                        let _ = tx.send(JobResult::Joined(Box::new(Joined {
                            tag: plan.tag,
                            room: plan.room,
                            member: plan.member,
                            name: plan.name,
                            location: c.joined.location,
                            token,
                            driver,
                            node: on,
                            shared,
                            post_ns,
                            answered_ns,
                            speaking,
                            limited,
                            window_marks: None,
                            janus: None,
                        })));
                    }
                    Err(err) => {
                        let _ = tx.send(JobResult::Failed { tag: plan.tag, err });
                    }
                }
            }
            Job::Leave {
                tag,
                location,
                node,
                driver,
                token,
                janus,
            } => {
                let ok = match &janus {
                    Some((session, handles)) => session.leave(handles).is_ok(),
                    None => signal::delete_auth(url_of(node), &location, token.as_deref()).is_ok(),
                };
                if let Some(d) = drivers.get(driver) {
                    d.send(Command::Remove(tag));
                    d.send(Command::Remove(tag | SUB_KEY));
                }
                let _ = tx.send(JobResult::Left { ok });
            }
            Job::Subscribe {
                tag,
                session,
                room,
                feeds,
                cfg,
                driver,
            } => {
                if phase.load(Ordering::Relaxed) >= 1 {
                    continue;
                }
                match janus::subscribe(&session, room, &feeds, bind, *cfg) {
                    Ok(s) => {
                        let shared = s.participant.shared();
                        if let Some(d) = drivers.get(driver) {
                            d.send(Command::Add {
                                id: tag | SUB_KEY,
                                participant: s.participant,
                                socket: Some(s.socket),
                            });
                        }
                        let _ = tx.send(JobResult::Subscribed {
                            tag,
                            handle: s.handle,
                            shared,
                        });
                    }
                    Err(e) => {
                        let err = JoinError {
                            body: format!("subscribe: {}", e.body),
                            ..e
                        };
                        let _ = tx.send(JobResult::SubFailed { tag, err });
                    }
                }
            }
            Job::SubscribeMore {
                tag,
                session,
                handle,
                feeds,
                driver,
            } => {
                if phase.load(Ordering::Relaxed) >= 1 {
                    continue;
                }
                let Some(d) = drivers.get(driver) else { return };
                // The subscription's participant lives on its driver thread:
                // it answers the offer there.
                let answer = |offer: &str| {
                    let (reply_tx, reply_rx) = std::sync::mpsc::sync_channel(1);
                    if !d.send(Command::Offer(tag | SUB_KEY, offer.to_string(), reply_tx)) {
                        return Err(JoinError::local("driver thread is gone"));
                    }
                    match reply_rx.recv_timeout(Duration::from_secs(5)) {
                        Ok(Ok(sdp)) => Ok(sdp),
                        Ok(Err(e)) => Err(JoinError::local(format!("{e}; offer was: {offer}"))),
                        Err(_) => Err(JoinError::local("the subscription is gone from its driver")),
                    }
                };
                let r = match janus::subscribe_more(&session, handle, &feeds, answer) {
                    Ok(()) => JobResult::Updated { tag },
                    Err(e) => JobResult::SubFailed {
                        tag,
                        err: JoinError {
                            body: format!("subscribe more: {}", e.body),
                            ..e
                        },
                    },
                };
                let _ = tx.send(r);
            }
            Job::Keepalive(sessions) => {
                for s in sessions {
                    if phase.load(Ordering::Relaxed) >= 1 {
                        break;
                    }
                    let _ = s.keepalive();
                }
            }
        }
    }
}

/// Joins a Janus room as a publisher and puts the participant on its driver.
#[allow(clippy::too_many_arguments)]
fn janus_publish(
    url: &str,
    room_name: &str,
    room_size: usize,
    bind: IpAddr,
    cfg: ParticipantConfig,
    plan: &crate::scenario::JoinPlan,
    driver: usize,
    d: &Driver,
) -> Result<Joined, JoinError> {
    let speaking = cfg.speaking;
    let limited = cfg.downlink_limit_bps.is_some();
    let p = janus::publish(url, room_name, room_size, bind, cfg)?;
    let shared = p.participant.shared();
    let answered_ns = clock::mono_ns();
    if !d.send(Command::Add {
        id: plan.tag,
        participant: p.participant,
        socket: Some(p.socket),
    }) {
        let _ = p.session.leave(&[p.handle]);
        return Err(JoinError::local("driver thread is gone"));
    }
    Ok(Joined {
        tag: plan.tag,
        room: plan.room,
        member: plan.member,
        name: plan.name.clone(),
        location: String::new(),
        token: None,
        driver,
        node: Some(0),
        shared,
        post_ns: p.post_ns,
        answered_ns,
        speaking,
        limited,
        window_marks: None,
        janus: Some(JanusPeer {
            session: p.session,
            room: p.room,
            feed: p.feed,
            pub_handle: p.handle,
            sub_handle: None,
            sub_shared: None,
            sub_feeds: Vec::new(),
            sub_busy: false,
            sub_dead: false,
        }),
    })
}

/// Files a joiner's result: a join, a failure, a subscription.
fn absorb_result(
    r: JobResult,
    joined: &mut HashMap<u64, Joined>,
    failures: &mut Vec<(u64, Option<u16>, String)>,
) {
    match r {
        JobResult::Joined(j) => {
            joined.insert(j.tag, *j);
        }
        JobResult::Failed { tag, err } => {
            // The first few in full: a failure's reason is in its body.
            if failures.len() < 3 {
                eprintln!("corelay-bench: participant {tag} failed: {err}");
            }
            failures.push((tag, err.status, err.body));
        }
        JobResult::Left { .. } => {}
        JobResult::Subscribed {
            tag,
            handle,
            shared,
        } => {
            if let Some(p) = joined.get_mut(&tag).and_then(|j| j.janus.as_mut()) {
                p.sub_handle = Some(handle);
                p.sub_shared = Some(shared);
                p.sub_busy = false;
            }
        }
        JobResult::Updated { tag } => {
            if let Some(p) = joined.get_mut(&tag).and_then(|j| j.janus.as_mut()) {
                p.sub_busy = false;
            }
        }
        JobResult::SubFailed { tag, err } => {
            if let Some(p) = joined.get_mut(&tag).and_then(|j| j.janus.as_mut()) {
                p.sub_busy = false;
                p.sub_dead |= p.sub_handle.is_none();
            }
            if failures.len() < 3 {
                eprintln!("corelay-bench: participant {tag} failed: {err}");
            }
            failures.push((tag, err.status, err.body));
        }
    }
}

/// Janus: the subscribe jobs due now. A participant subscribes once its own
/// publisher is up, to the feeds of its room whose publishers are up (Janus
/// knows a feed only then), and later publishers are added to that
/// subscription as they come up. The bench knows who joined and who is
/// connected, so it needs no `publishers` events from Janus. One job per
/// participant at a time: feeds that come up while one is in flight wait
/// and go in the next, together.
fn janus_subscriptions(
    joined: &mut HashMap<u64, Joined>,
    rng: &mut fastrand::Rng,
    sub_cfg: &dyn Fn(&str, u64, u64) -> Box<ParticipantConfig>,
) -> Vec<Job> {
    let mut up: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for j in joined.values() {
        let Some(p) = &j.janus else { continue };
        if j.shared.lock().map(|s| s.connected).unwrap_or(false) {
            up.entry(j.room).or_default().push((j.tag, p.feed));
        }
    }
    let mut jobs = Vec::new();
    for j in joined.values_mut() {
        let Some(p) = j.janus.as_mut() else { continue };
        if p.sub_busy || p.sub_dead {
            continue;
        }
        let Some(room) = up.get(&j.room) else {
            continue;
        };
        if !room.iter().any(|(t, _)| *t == j.tag) {
            continue; // our own publisher is not up yet
        }
        let feeds: Vec<u64> = room
            .iter()
            .filter(|(t, f)| *t != j.tag && !p.sub_feeds.contains(f))
            .map(|(_, f)| *f)
            .collect();
        if feeds.is_empty() {
            continue;
        }
        p.sub_feeds.extend(&feeds);
        p.sub_busy = true;
        jobs.push(match p.sub_handle {
            None => Job::Subscribe {
                tag: j.tag,
                session: p.session.clone(),
                room: p.room,
                feeds,
                cfg: sub_cfg(&j.name, j.tag, rng.u64(..)),
                driver: j.driver,
            },
            Some(handle) => Job::SubscribeMore {
                tag: j.tag,
                session: p.session.clone(),
                handle,
                feeds,
                driver: j.driver,
            },
        });
    }
    jobs
}

fn progress_line(
    plan: &Plan,
    series: &Series,
    samples: &[Sample],
    s: &Sample,
    joined: usize,
    failed: usize,
    planned: usize,
) {
    let done = (s.t.floor() as u64).checked_sub(1);
    let last = done.and_then(|d| series.seconds.get(&d));
    let (pps, p50, p99, max) = match last {
        Some(i) => (
            i.rx_video_packets + i.rx_audio_packets,
            i.video_lat.value_at_quantile(0.5) as f64 / 1000.0,
            i.video_lat.value_at_quantile(0.99) as f64 / 1000.0,
            i.video_lat.max() as f64 / 1000.0,
        ),
        None => (0, 0.0, 0.0, 0.0),
    };
    let (mut scpu, mut ccpu) = (None, None);
    if let Some(prev) = samples.last() {
        let dt = s.t - prev.t;
        if let (Some(a), Some(b)) = (&prev.server, &s.server) {
            scpu = Some(crate::util::cpu_delta(a, b, dt).0);
        }
        if let (Some(a), Some(b)) = (&prev.client, &s.client) {
            ccpu = Some(crate::util::cpu_delta(a, b, dt).0);
        }
    }
    let rooms_started = plan
        .joins
        .iter()
        .filter(|j| j.at.as_secs_f64() <= s.t)
        .map(|j| j.room)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    eprintln!(
        "[{:5.0}s] rooms {rooms_started}/{}  participants {} active / {joined} joined / {planned} planned (failed {failed})  rx {pps} pkt/s  e2e p50 {p50:.2} p99 {p99:.2} max {max:.2} ms  cpu server {} client {} cores",
        s.t,
        plan.room_sizes.len(),
        s.active,
        scpu.map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "-".into()),
        ccpu.map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "-".into()),
    );
}

/// Failures grouped by status ("503", "400", "error" when there was no HTTP answer).
pub fn failures_by_status(f: &[(u64, Option<u16>, String)]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (_, st, _) in f {
        let k = st.map(|s| s.to_string()).unwrap_or_else(|| "error".into());
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// Folds one driver report into the run's state: first media and connect
/// times per participant (the earliest wins) and the per-second series.
fn absorb(
    r: &Report,
    first_media: &mut HashMap<u64, u64>,
    connected_at: &mut HashMap<u64, u64>,
    series: &mut Series,
) {
    for &(tag, ns) in &r.interval.first_media {
        first_media.entry(tag).or_insert(ns);
    }
    for &(tag, ns) in &r.interval.connected {
        connected_at.entry(tag).or_insert(ns);
    }
    series.add(r);
}
