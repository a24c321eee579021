//! corelay-bench: load generator and measurement client for corelay (or any
//! SFU that speaks corelay's participant API). See docs/benchmarks.md.

// Nested `if let` reads better than long let-chains here (same choice as str0m).
#![allow(clippy::collapsible_if)]

// The load generator allocates per packet inside str0m as the server does;
// mimalloc for the same reason as the server's (crates/server/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cluster;
mod compare;
mod floor;
mod metrics;
mod packetize;
mod reach;
mod report;
mod run;
mod scenario;
mod simulcast;
mod svg;
mod util;
mod verdict;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use corelay_client::VideoCodec;
use serde_json::json;

use crate::util::{parse_duration, parse_rate};

#[derive(Parser, Debug)]
#[command(
    name = "corelay-bench",
    version,
    about = "Load generator and measurement client for corelay"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
struct CommonArgs {
    /// The server's signaling: corelay (docs/api.md) or janus (Janus
    /// VideoRoom over its HTTP API; --url is the API root, e.g.
    /// http://127.0.0.1:18088/janus; see docs/benchmarks.md, "Janus").
    #[arg(long, global = true, value_enum, default_value_t = run::Dialect::Corelay)]
    dialect: run::Dialect,
    /// Server base URL (participant API). Given more than once (the nodes
    /// of a cluster), participant k joins through the (k mod n)-th, so that
    /// rooms have members on different nodes; the stats of every node are
    /// polled and summed.
    #[arg(
        long,
        global = true,
        default_value = "http://127.0.0.1:7070",
        env = "CORELAY_BENCH_URL"
    )]
    url: Vec<String>,
    /// Directory for summary.json, timeseries.csv, plots, report.txt.
    #[arg(long, global = true, default_value = "bench-out")]
    out: PathBuf,
    /// Client driver threads (one per client core).
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
    /// Server process id, for its CPU figures from /proc (more than one, or
    /// comma-separated: a cluster's nodes, summed).
    #[arg(long, global = true, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Packetized frame file to replay (default: assets/media/video-360p30.frames if present, else synthetic).
    #[arg(long, global = true)]
    media: Option<PathBuf>,
    /// Use synthetic video even if the frame file exists.
    #[arg(long, global = true)]
    synthetic: bool,
    /// Pin driver threads to these CPUs (comma-separated).
    #[arg(long, global = true, value_delimiter = ',')]
    pin: Vec<usize>,
    /// HTTP joiner threads.
    #[arg(long, global = true, default_value_t = 4)]
    joiners: usize,
    /// Video codec to offer: h264 or vp8.
    #[arg(long, global = true, default_value_t = VideoCodec::H264)]
    codec: VideoCodec,
    /// Local IP for participant sockets.
    #[arg(long, global = true, default_value = "127.0.0.1")]
    bind_ip: IpAddr,
    /// Do not poll the server's /api/v1/stats.
    #[arg(long, global = true)]
    no_server_stats: bool,
    /// Random seed (join times, start offsets).
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// No progress line.
    #[arg(long, global = true)]
    quiet: bool,
    /// The server's --auth-secret: every join and leave carries a token
    /// minted with it (and the stats polls an admin token).
    #[arg(
        long,
        global = true,
        env = "CORELAY_AUTH_SECRET",
        hide_env_values = true
    )]
    auth_secret: Option<String>,
    /// Publish video as three simulcast layers, rids q, h, f (a=simulcast:send
    /// q;h;f), from --layer-media (default assets/media/video-{180,360,720}p30.frames;
    /// synthetic 150/400/1500 kbps with --synthetic).
    #[arg(long, global = true)]
    simulcast: bool,
    /// Publish video as one VP9 SVC stream (with --codec vp9), e.g.
    /// L3T3_KEY: three spatial layers, 1:3:9 of the source's bytes
    /// (synthetic: 1500 kbps).
    #[arg(long, global = true)]
    svc: Option<corelay_client::Svc>,
    /// Frame files of the simulcast layers, low to high (comma-separated, three).
    #[arg(long, global = true, value_delimiter = ',')]
    layer_media: Vec<PathBuf>,
    /// Emulated downlink bottleneck for a share of the subscribers (e.g.
    /// 300kbit, 2mbit): a token bucket at this rate with a 50 ms queue inside
    /// the client, before str0m.
    #[arg(long, global = true, value_parser = parse_rate)]
    downlink_limit: Option<u64>,
    /// Share of subscribers behind --downlink-limit (0..1; every k-th by join order).
    #[arg(long, global = true, default_value_t = 0.5)]
    limited_share: f64,
    /// Send and receive media through str0m's streams for the whole run,
    /// instead of the participants' own media path once connected (see
    /// corelay_client::fastpath): about 1.4 times the client CPU per
    /// packet, and a lost packet NACKed every 33 ms instead of once.
    #[arg(long, global = true)]
    str0m_media: bool,
    /// A UDP socket per participant instead of one per driver thread (see
    /// corelay_client::driver): to measure what the shared socket saves,
    /// or to bind participants to a routable --bind-ip. The shared socket
    /// is used only with the corelay dialect and a loopback --bind-ip.
    #[arg(long, global = true)]
    socket_per_participant: bool,
    /// Participants negotiate no transport-wide congestion control (no
    /// `transport-cc`, no transport-wide sequence numbers), as werift,
    /// libdatachannel and aiortc by default: the server's estimate of their
    /// downlinks comes from their receiver reports.
    #[arg(long, global = true)]
    no_twcc: bool,
    /// A TURN server (coturn, use-auth-secret) that --relayed-share of the
    /// participants join through, over UDP: `turn:HOST:PORT` (see
    /// docs/benchmarks.md, "Reach"). Needs --turn-secret-file.
    #[arg(long, global = true, requires = "turn_secret_file")]
    turn: Option<String>,
    /// File holding coturn's static auth secret (its --static-auth-secret):
    /// each relayed participant gets credentials minted with it
    /// (username `expiry:name`, password base64(HMAC-SHA1)).
    #[arg(long, global = true, requires = "turn")]
    turn_secret_file: Option<PathBuf>,
    /// Share of participants that join through --turn (0..1; every k-th
    /// by join order).
    #[arg(long, global = true, default_value_t = 0.5)]
    relayed_share: f64,
    /// When into the run (e.g. 20s) a share of the participants moves to
    /// a new local address (a new socket: a new port, and 127.0.0.2 for
    /// 127.0.0.1 on loopback) and carries on; summary.json's `reach` then
    /// has each one's time until it received media again.
    #[arg(long, global = true, value_parser = parse_duration)]
    network_change_at: Option<Duration>,
    /// Share of participants that move at --network-change-at (0..1;
    /// relayed ones never move).
    #[arg(long, global = true, default_value_t = 0.5)]
    network_change_share: f64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The article's benchmark: rooms of N fully interactive participants, a new room every interval.
    Rooms(RoomsArgs),
    /// The conference of reference 004: rooms of 10, one rotating speaker, silent participants on Opus DTX.
    Speakers(SpeakersArgs),
    /// Convert an H.264 Annex-B stream into a packetized frame file.
    Packetize(PacketizeArgs),
    /// This host's cost floor for forwarding: recvmmsg, SRTP decrypt, and per
    /// output copy SRTP encrypt + sendmmsg; no WebRTC logic. Prints JSON.
    Floor(FloorArgs),
    /// Starts a cluster on this machine (one nats-server, --nodes corelay
    /// nodes on loopback ports), waits until every node lists all of them,
    /// runs rooms (or a webinar) whose members are spread over the nodes,
    /// and stops it all. --url and --server-pid are the cluster's own.
    Cluster(ClusterArgs),
    /// One table and overlaid percentile plots from finished runs of several
    /// servers: `compare --out DIR tpc=RUN ws=RUN tpc=RUN ...` (repeats of a
    /// label are merged; ratios are to the first label).
    Compare(CompareArgs),
    /// Issue 52: rooms with known faults (a lossy publisher uplink, a
    /// limited subscriber downlink, clean pairs, and with --server-pid a
    /// stretch of server stalls by SIGSTOP/SIGCONT); scores the server's
    /// per-second verdicts (GET …/diagnosis) against them. See
    /// docs/benchmarks.md, "Verdict".
    Verdict(VerdictArgs),
}

#[derive(Args, Debug)]
struct VerdictArgs {
    /// Scored time, after the warm-up.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Not scored: joins, ICE, the estimates' climb.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    warmup: Duration,
    /// Not scored after each change of phase (into and out of the stalls).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    settle: Duration,
    /// Share of the lossy publisher's datagrams dropped on its uplink.
    #[arg(long, default_value_t = 0.1)]
    uplink_loss: f64,
    /// The limited subscriber's downlink (token bucket in the client).
    #[arg(long, default_value = "250kbit", value_parser = parse_rate)]
    downlink_limit: u64,
    /// How long the server is stopped in each second of the stall phase
    /// (needs --server-pid).
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    stall: Duration,
    /// The stall phase's share of the scored time, in its middle (0: none).
    #[arg(long, default_value_t = 0.25)]
    stall_share: f64,
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Title over the table and plots (the scenario).
    #[arg(long, default_value = "comparison")]
    title: String,
    /// LABEL=DIR, one per run (DIR has summary.json and the histograms every run writes).
    #[arg(required = true)]
    runs: Vec<String>,
}

#[derive(Args, Debug)]
struct ClusterArgs {
    /// corelay nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Shards per node.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// The corelay binary (default: $CORELAY_BIN, else `corelay` beside this
    /// binary, as cargo builds them: target/<profile>/).
    #[arg(long)]
    server_bin: Option<std::path::PathBuf>,
    /// The nats-server binary (default: on PATH, else /usr/sbin/nats-server).
    #[arg(long)]
    nats_bin: Option<std::path::PathBuf>,
    /// Extra flags for every node (split at spaces).
    #[arg(long, default_value = "")]
    node_args: String,
    /// The nodes' --log level (their logs are in OUT/cluster/).
    #[arg(long, default_value = "warn")]
    node_log: String,
    /// Rooms of --room-size members, every one publishing; or a webinar:
    /// one room, one publisher, --viewers who only receive.
    #[arg(long, value_enum, default_value_t = cluster::Shape::Rooms)]
    shape: cluster::Shape,
    /// Participants per room (rooms shape; with 3 nodes, 4 gives every
    /// room both same-node and cross-node pairs).
    #[arg(long, default_value_t = 4)]
    room_size: usize,
    /// A new room every ... (rooms shape).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    room_interval: Duration,
    /// Rooms (rooms shape).
    #[arg(long, default_value_t = 6)]
    max_rooms: usize,
    /// Viewers (webinar shape).
    #[arg(long, default_value_t = 6)]
    viewers: usize,
    /// Each room's joins are spread uniformly over ...
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    join_spread: Duration,
    /// Hold after the last join for ...
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Publish audio too.
    #[arg(long)]
    audio: bool,
    /// How long the nodes may take to list each other.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    form_timeout: Duration,
}

#[derive(Args, Debug)]
struct FloorArgs {
    /// Output copies per input packet (room size - 1).
    #[arg(long, default_value_t = 3)]
    fanout: usize,
    /// RTP payload bytes per packet.
    #[arg(long, default_value_t = 1000)]
    payload: usize,
    /// Input packets per second.
    #[arg(long, default_value_t = 5000)]
    rate: u64,
    /// Largest recvmmsg/sendmmsg batch (the server's: 32).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Participants, each a publisher of the input and a socket the output
    /// is delivered to (at least fan-out + 1; `scripts/bench` passes the
    /// scenario's). The default is one room.
    #[arg(long)]
    subscribers: Option<usize>,
    /// Input packets sent back to back, so that the floor reads batches of
    /// about this size (`scripts/bench` passes what the server read per
    /// wake-up in the scenario).
    #[arg(long, default_value_t = 16)]
    burst: usize,
    /// Seconds measured (after 0.5 s of warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// CPU for the floor thread (where the server's shard runs).
    #[arg(long)]
    pin_floor: Option<usize>,
    /// CPU for the thread that sends the input and drains the output.
    #[arg(long)]
    pin_load: Option<usize>,
}

#[derive(Args, Debug)]
struct RoomsArgs {
    /// Participants per room.
    #[arg(long, default_value_t = 4)]
    room_size: usize,
    /// A new room every ...
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    room_interval: Duration,
    /// Each room's joins are spread uniformly over ...
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    join_spread: Duration,
    /// Stop adding rooms at ...
    #[arg(long, default_value_t = 10)]
    max_rooms: usize,
    /// Hold after the last join for ...
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Publish audio too (the article is video only).
    #[arg(long)]
    audio: bool,
    /// Video receive slots (default: room size - 1).
    #[arg(long)]
    video_slots: Option<usize>,
}

#[derive(Args, Debug)]
struct SpeakersArgs {
    /// Participants in total.
    #[arg(long, default_value_t = 100)]
    participants: usize,
    /// Participants per room.
    #[arg(long, default_value_t = 10)]
    room_size: usize,
    /// Each speaker talks for ...
    #[arg(long, default_value = "4s", value_parser = parse_duration)]
    speaker_interval: Duration,
    /// The next speaker starts this much before the current one stops.
    #[arg(long, default_value = "600ms", value_parser = parse_duration)]
    overlap: Duration,
    /// Joins spread uniformly over ...
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    join_spread: Duration,
    /// Hold after the last join for ...
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Video receive slots (default: room size - 1, every camera visible).
    #[arg(long)]
    video_slots: Option<usize>,
    /// Audio receive slots.
    #[arg(long, default_value_t = 3)]
    audio_slots: usize,
}

#[derive(Args, Debug)]
struct PacketizeArgs {
    /// H.264 Annex-B elementary stream.
    #[arg(long)]
    input: PathBuf,
    /// Frame file to write.
    #[arg(long)]
    output: PathBuf,
    /// Frames per second of the stream.
    #[arg(long, default_value_t = 30)]
    fps: u32,
    /// Largest RTP payload.
    #[arg(long, default_value_t = 1200)]
    mtu: usize,
}

fn default_media() -> Option<PathBuf> {
    asset("video-360p30.frames")
}

fn asset(name: &str) -> Option<PathBuf> {
    let candidates = [
        PathBuf::from("assets/media").join(name),
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../assets/media")
            .join(name),
    ];
    candidates.into_iter().find(|p| p.is_file())
}

/// The simulcast layers' frame files: as given, else the assets (empty if
/// they are missing: synthetic layers).
fn layer_media(given: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    if !given.is_empty() {
        if given.len() != 3 {
            return Err(format!(
                "--layer-media takes three frame files (q, h, f), not {}",
                given.len()
            ));
        }
        return Ok(given.to_vec());
    }
    let found: Vec<PathBuf> = [
        "video-180p30.frames",
        "video-360p30.frames",
        "video-720p30.frames",
    ]
    .iter()
    .filter_map(|n| asset(n))
    .collect();
    Ok(if found.len() == 3 { found } else { Vec::new() })
}

/// `--turn`, `--turn-secret-file`, `--relayed-share`,
/// `--network-change-at`, `--network-change-share`.
fn reach_opts(c: &CommonArgs) -> Result<reach::ReachOpts, String> {
    for (flag, v) in [
        ("--relayed-share", c.relayed_share),
        ("--network-change-share", c.network_change_share),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{flag} must be in 0..1"));
        }
    }
    let turn = match (&c.turn, &c.turn_secret_file) {
        (Some(url), Some(file)) => {
            let addr = reach::parse_turn_url(url)?;
            let secret = std::fs::read_to_string(file)
                .map_err(|e| format!("--turn-secret-file {}: {e}", file.display()))?;
            let secret = secret.trim();
            if secret.is_empty() {
                return Err(format!("--turn-secret-file {} is empty", file.display()));
            }
            Some((addr, secret.as_bytes().to_vec()))
        }
        _ => None,
    };
    Ok(reach::ReachOpts {
        turn,
        relayed_share: c.relayed_share,
        change_at: c.network_change_at,
        change_share: c.network_change_share,
    })
}

fn main() {
    let cli = Cli::parse();
    let c = &cli.common;
    if !(0.0..=1.0).contains(&c.limited_share) {
        eprintln!("corelay-bench: --limited-share must be in 0..1");
        std::process::exit(2);
    }
    let layers = run::Layers {
        simulcast: c.simulcast,
        media: match layer_media(&c.layer_media) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("corelay-bench: {e}");
                std::process::exit(2);
            }
        },
        downlink_limit_bps: c.downlink_limit,
        limited_share: c.limited_share,
        svc: c.svc,
    };
    if c.svc.is_some() && (c.codec != VideoCodec::Vp9 || c.simulcast) {
        eprintln!("corelay-bench: --svc takes --codec vp9 and no --simulcast");
        std::process::exit(2);
    }
    let reach = match reach_opts(c) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("corelay-bench: {e}");
            std::process::exit(2);
        }
    };
    let janus = c.dialect == run::Dialect::Janus;
    if janus && reach.reported() {
        eprintln!("corelay-bench: --turn and --network-change-at are for the corelay dialect");
        std::process::exit(2);
    }
    if janus && (c.simulcast || c.auth_secret.as_ref().is_some_and(|s| !s.is_empty())) {
        eprintln!("corelay-bench: --dialect janus takes neither --simulcast nor --auth-secret");
        std::process::exit(2);
    }
    let urls: Vec<String> = c
        .url
        .iter()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect();
    if janus && urls.len() > 1 {
        eprintln!("corelay-bench: --dialect janus takes one --url");
        std::process::exit(2);
    }
    let mut common = run::Common {
        url: urls.first().cloned().unwrap_or_default(),
        urls,
        dialect: c.dialect,
        out: c.out.clone(),
        threads: c.threads.max(1),
        server_pids: c.server_pid.clone(),
        media: if c.synthetic {
            None
        } else {
            c.media.clone().or_else(default_media)
        },
        pin: c.pin.clone(),
        joiners: c.joiners.max(1),
        codec: c.codec,
        bind_ip: c.bind_ip,
        // Janus has no /api/v1/stats (its admin API is off).
        server_stats: !c.no_server_stats && !janus,
        seed: c.seed,
        progress: !c.quiet,
        auth_secret: c
            .auth_secret
            .as_ref()
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec()),
        layers,
        own_media_path: !c.str0m_media,
        twcc: !c.no_twcc,
        shared_socket: !c.socket_per_participant && !janus && c.bind_ip.is_loopback(),
        reach,
    };
    let code = match cli.cmd {
        Cmd::Packetize(a) => packetize(&a),
        Cmd::Compare(a) => match compare::compare(&a.runs, &common.out, &a.title) {
            Ok(table) => {
                println!("{table}");
                0
            }
            Err(e) => {
                eprintln!("corelay-bench compare: {e}");
                2
            }
        },
        Cmd::Floor(a) => {
            let spec = floor::FloorSpec {
                fanout: a.fanout,
                payload: a.payload,
                rate: a.rate,
                batch: a.batch,
                subscribers: a.subscribers.unwrap_or(a.fanout + 1),
                burst: a.burst,
                seconds: a.seconds,
                pin_floor: a.pin_floor,
                pin_load: a.pin_load,
            };
            match floor::run(&spec) {
                Ok(v) => {
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                    0
                }
                Err(e) => {
                    eprintln!("corelay-bench floor: {e}");
                    2
                }
            }
        }
        Cmd::Rooms(a) => {
            let vs = a.video_slots.unwrap_or(a.room_size.saturating_sub(1));
            let plan = scenario::rooms(
                a.room_size,
                a.room_interval,
                a.join_spread,
                a.max_rooms,
                a.duration,
                c.seed,
            );
            let shape = run::Shape {
                video: true,
                audio: a.audio,
                video_slots: vs,
                audio_slots: if a.audio {
                    a.room_size.saturating_sub(1)
                } else {
                    0
                },
                dtx: false,
            };
            let config = json!({
                "room_size": a.room_size, "room_interval_s": a.room_interval.as_secs_f64(),
                "join_spread_s": a.join_spread.as_secs_f64(), "max_rooms": a.max_rooms,
                "duration_s": a.duration.as_secs_f64(), "audio": a.audio, "video_slots": vs,
            });
            execute(&common, plan, shape, config, vs)
        }
        Cmd::Speakers(a) => {
            let vs = a.video_slots.unwrap_or(a.room_size.saturating_sub(1));
            let sp = scenario::SpeakerPlan {
                interval: a.speaker_interval,
                overlap: a.overlap,
            };
            let plan = scenario::speakers(
                a.participants,
                a.room_size,
                a.join_spread,
                a.duration,
                sp,
                c.seed,
            );
            let shape = run::Shape {
                video: true,
                audio: true,
                video_slots: vs,
                audio_slots: a.audio_slots,
                dtx: true,
            };
            let config = json!({
                "participants": a.participants, "room_size": a.room_size,
                "speaker_interval_s": a.speaker_interval.as_secs_f64(), "overlap_s": a.overlap.as_secs_f64(),
                "join_spread_s": a.join_spread.as_secs_f64(), "duration_s": a.duration.as_secs_f64(),
                "video_slots": vs, "audio_slots": a.audio_slots,
            });
            execute(&common, plan, shape, config, vs)
        }
        Cmd::Cluster(a) => run_cluster(&mut common, &a),
        Cmd::Verdict(a) => run_verdict(&common, &a),
    };
    std::process::exit(code);
}

/// The `verdict` scenario ([`verdict`]).
fn run_verdict(common: &run::Common, a: &VerdictArgs) -> i32 {
    let spec = verdict::Spec {
        duration: a.duration,
        warmup: a.warmup,
        settle: a.settle,
        uplink_loss: a.uplink_loss,
        downlink_limit_bps: a.downlink_limit,
        stall: a.stall,
        stall_share: a.stall_share,
    };
    match verdict::run(common, &spec) {
        Ok(s) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&s["verdict"]).unwrap_or_default()
            );
            0
        }
        Err(e) => {
            eprintln!("corelay-bench verdict: {e}");
            2
        }
    }
}

/// The `cluster` scenario: start the cluster, run its plan, stop it.
fn run_cluster(common: &mut run::Common, a: &ClusterArgs) -> i32 {
    if common.dialect != run::Dialect::Corelay {
        eprintln!("corelay-bench cluster: corelay's own dialect only");
        return 2;
    }
    let (plan, shape, vs) = match a.shape {
        cluster::Shape::Rooms => {
            let vs = a.room_size.saturating_sub(1);
            let plan = scenario::rooms(
                a.room_size,
                a.room_interval,
                a.join_spread,
                a.max_rooms,
                a.duration,
                common.seed,
            );
            let shape = run::Shape {
                video: true,
                audio: a.audio,
                video_slots: vs,
                audio_slots: if a.audio { vs } else { 0 },
                dtx: false,
            };
            (plan, shape, vs)
        }
        cluster::Shape::Webinar => {
            let plan = scenario::webinar(a.viewers, a.join_spread, a.duration, common.seed);
            let shape = run::Shape {
                video: true,
                audio: a.audio,
                video_slots: 1,
                audio_slots: usize::from(a.audio),
                dtx: false,
            };
            (plan, shape, 1)
        }
    };
    let spec = cluster::Spec {
        nodes: a.nodes.max(1),
        shards: a.shards.max(1),
        server_bin: a
            .server_bin
            .clone()
            .unwrap_or_else(cluster::default_server_bin),
        nats_bin: a.nats_bin.clone().or_else(cluster::nats_binary),
        node_args: a.node_args.split_whitespace().map(String::from).collect(),
        node_log: a.node_log.clone(),
        auth_secret: common.auth_secret.clone(),
        dir: common.out.join("cluster"),
        form_timeout: a.form_timeout,
    };
    let c = match cluster::Cluster::start(&spec) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("corelay-bench cluster: {e}");
            return 2;
        }
    };
    eprintln!(
        "corelay-bench cluster: {} nodes formed on {} ({})",
        spec.nodes,
        c.nats_url(),
        c.urls().join(", ")
    );
    common.urls = c.urls();
    common.url = common.urls.first().cloned().unwrap_or_default();
    common.server_pids = c.pids();
    let config = json!({
        "shape": a.shape.name(), "nodes": spec.nodes, "shards_per_node": spec.shards,
        "room_size": if a.shape == cluster::Shape::Rooms { a.room_size } else { a.viewers + 1 },
        "room_interval_s": a.room_interval.as_secs_f64(), "max_rooms": a.max_rooms,
        "viewers": (a.shape == cluster::Shape::Webinar).then_some(a.viewers),
        "join_spread_s": a.join_spread.as_secs_f64(), "duration_s": a.duration.as_secs_f64(),
        "audio": a.audio, "video_slots": vs, "urls": common.urls,
        "server_bin": spec.server_bin.display().to_string(),
    });
    let code = execute(common, plan.named("cluster"), shape, config, vs);
    let left = c.stop();
    if !left.is_empty() {
        eprintln!("corelay-bench cluster: {left}");
    }
    code
}

fn execute(
    common: &run::Common,
    plan: scenario::Plan,
    shape: run::Shape,
    mut config: serde_json::Value,
    vs: usize,
) -> i32 {
    if let Some(o) = config.as_object_mut() {
        o.insert("url".into(), json!(common.url));
        o.insert(
            "dialect".into(),
            json!(match common.dialect {
                run::Dialect::Corelay => "corelay",
                run::Dialect::Janus => "janus",
            }),
        );
        o.insert("threads".into(), json!(common.threads));
        // One node: as it always was (a number or null).
        match common.server_pids.as_slice() {
            [] => o.insert("server_pid".into(), json!(null)),
            [one] => o.insert("server_pid".into(), json!(one)),
            many => o.insert("server_pid".into(), json!(many)),
        };
        if common.urls.len() > 1 {
            o.insert("urls".into(), json!(common.urls));
        }
        o.insert("codec".into(), json!(format!("{:?}", common.codec)));
        o.insert("seed".into(), json!(common.seed));
        o.insert("auth".into(), json!(common.auth_secret.is_some()));
        if common.layers.reported() {
            o.insert("simulcast".into(), json!(common.layers.simulcast));
            o.insert(
                "downlink_limit_bps".into(),
                json!(common.layers.downlink_limit_bps),
            );
            o.insert("limited_share".into(), json!(common.layers.limited_share));
        }
    }
    eprintln!(
        "corelay-bench {}: {} participants in {} rooms, last join at {:.1}s, leaving at {:.1}s; media: {}",
        plan.scenario,
        plan.joins.len(),
        plan.room_sizes.len(),
        plan.last_join.as_secs_f64(),
        plan.end.as_secs_f64(),
        common
            .media
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "synthetic".into())
    );
    let outcome = match run::run(common, plan, shape) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("corelay-bench: {e}");
            return 2;
        }
    };
    match report::write_all(&outcome, &common.out, config, vs) {
        Ok(s) => {
            print!("{}", report::table(&s));
            println!("outputs in {}", common.out.display());
            // A run with an outage says so in its exit status too (3), so a
            // script cannot take it for a measurement.
            match s["outages"].as_array() {
                Some(list) if !list.is_empty() => {
                    eprintln!(
                        "corelay-bench: OUTAGE: {} publisher->subscriber silence(s) over {} s inside the measurement window",
                        s["pairs"]["outage_count"],
                        report::OUTAGE.as_secs()
                    );
                    3
                }
                _ => 0,
            }
        }
        Err(e) => {
            eprintln!("corelay-bench: writing outputs: {e}");
            2
        }
    }
}

fn packetize(a: &PacketizeArgs) -> i32 {
    let data = match std::fs::read(&a.input) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{}: {e}", a.input.display());
            return 2;
        }
    };
    let name = a
        .input
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("input");
    match packetize::frame_file(&data, a.fps, a.mtu, name) {
        Ok(text) => {
            if let Err(e) = std::fs::write(&a.output, &text) {
                eprintln!("{}: {e}", a.output.display());
                return 2;
            }
            eprintln!("{}", text.lines().take(2).collect::<Vec<_>>().join("\n"));
            0
        }
        Err(e) => {
            eprintln!("packetize: {e}");
            2
        }
    }
}
