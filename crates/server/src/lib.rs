//! corelay, the server: one control thread (HTTP signaling, placement,
//! admission) and one pinned shard per core (the data plane).
//!
//! Layout: [`control`] is the control thread, `shard` (private) the data
//! plane, [`logging`] the log's filter and format, and this file the start:
//! flags into settings, the data plane started (the pinned shards, or the
//! work-stealing baseline of the `corelay-ws` crate for comparison,
//! `--runtime work-stealing`, both a `corelay_plane::DataPlane`), the
//! control thread served over it (with `--cluster`, its heartbeat in the
//! cluster's node directory: `control::cluster`), the shutdown. The interface between the
//! control thread and either data plane is the `corelay-plane` crate's; the
//! sans-I/O core that both drive is `corelay-core`.

pub mod config;
pub mod control;
pub mod logging;
pub mod recorder;
mod shard;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use corelay_core::{DtlsIdentity, OfferLimits, ParticipantLimits, RtcSettings, ShardId};
use corelay_plane::{DataPlane, ToControl};
use corelay_ws::{WorkStealing, WsSpec};
use tokio::sync::mpsc;

use crate::config::{Config, PortLayout, Runtime, ShardFailure};
use crate::control::{Limits, State};
use crate::shard::mesh::Mesh;
use crate::shard::{ShardSpec, Shards, bind};

/// Runs the server until ctrl-c or SIGTERM (or until a shard fails, with
/// `--on-shard-failure exit`: then it returns the failure as an error, so
/// that the process exits non-zero and its supervisor restarts it). Call
/// from the main thread: it becomes the control thread.
pub fn run(cfg: Config) -> Result<(), Box<dyn std::error::Error>> {
    install_panic_hook();
    // aws-lc-rs for SRTP, OpenSSL for the DTLS handshake: it takes RSA client
    // certificates (GStreamer), which str0m's own DTLS refuses.
    corelay_dtls::provider().install_process_default();
    // One DTLS identity for every participant, its OpenSSL context built
    // here, before any shard runs: a join then costs no key generation on
    // the control thread, and no OpenSSL lock is ever taken there.
    let identity =
        corelay_dtls::server_certificate().ok_or("could not make the server's DTLS certificate")?;
    let access = Arc::new(control::auth::Access::from_config(&cfg)?);
    let ice_servers = Arc::new(control::turn::IceServers::new(
        &cfg.turn_urls,
        cfg.turn_secret_file.as_deref(),
        cfg.turn_ttl,
    )?);
    if ice_servers.enabled() {
        tracing::info!(urls = ?cfg.turn_urls, ttl_s = cfg.turn_ttl.as_secs(), "TURN servers handed out");
    }
    // Checked before anything binds: a bad combination is a startup error.
    let cluster = cfg.cluster_settings()?;
    if !access.enabled() {
        tracing::warn!("no --auth-secret: the API runs without authentication, open to anyone");
    }
    let n = cfg.shard_count();
    let ip = cfg.advertised_ip();
    let work_stealing = cfg.runtime == Runtime::WorkStealing;
    if work_stealing && !cfg.no_ice_tcp {
        tracing::info!(
            "--runtime work-stealing: ICE-TCP is not offered (the baseline serves UDP only)"
        );
    }
    let ice_tcp = !cfg.no_ice_tcp && !work_stealing;
    let (layout, steering) = port_layout(&cfg, n, work_stealing);
    let settings = RtcSettings {
        video_codecs: cfg.video_codecs(),
        offer: OfferLimits {
            max_sdp_bytes: cfg.max_sdp_bytes,
            max_mlines: cfg.max_mlines,
        },
        participant: ParticipantLimits {
            connect_timeout: cfg.connect_timeout,
            reconnect_grace: cfg.reconnect_grace,
            max_addrs: cfg.max_addrs_per_participant.max(1),
            requests_per_second: cfg.max_requests_per_second.max(1),
            max_message_bytes: cfg.max_message_bytes as usize,
        },
        ice_tcp,
        bwe_initial_bps: (!cfg.no_bwe).then_some(cfg.bwe_start_kbps.max(50) * 1000),
        dtls_identity: Some(DtlsIdentity(identity)),
        faults: cfg.faults(),
        shared_port: (layout == PortLayout::Shared && !work_stealing).then_some(n),
    };
    let (to_control, from_shards) = mpsc::unbounded_channel();
    let description = if work_stealing {
        format!(
            "UDP {ip}:{} (work-stealing runtime, {n} workers)",
            cfg.udp_port
        )
    } else {
        match layout {
            PortLayout::Shared => format!(
                "UDP {ip}:{} (shared by {n} shards{})",
                cfg.udp_port,
                if steering.is_some() {
                    ", eBPF steering"
                } else {
                    ""
                }
            ),
            PortLayout::PerShard => format!(
                "UDP {ip}:{}-{} ({n} shards)",
                cfg.udp_port,
                cfg.udp_port as usize + n - 1
            ),
        }
    };
    let mut started = Started {
        port_steering: false,
        settings,
        access,
        ice_servers,
        cluster,
        from_shards,
        ip,
        description,
    };
    if work_stealing {
        raise_nofile_limit();
        let addr = SocketAddr::new(cfg.bind_ip, cfg.udp_port);
        let socket = bind(addr, !cfg.no_packet_metrics)
            .map_err(|e| format!("cannot bind UDP {addr}: {e}"))?;
        let plane = WorkStealing::start(WsSpec {
            socket,
            advertised: SocketAddr::new(ip, cfg.udp_port),
            source: reply_source(cfg.bind_ip, ip),
            settings: started.settings.clone(),
            to_control,
            workers: n,
            packet_metrics: !cfg.no_packet_metrics,
            offload: !cfg.no_udp_offload,
        })?;
        serve(&cfg, plane, started)
    } else {
        let mut specs = shard_specs(
            &cfg,
            n,
            ip,
            layout,
            &started.settings,
            &to_control,
            started.cluster.as_ref(),
        )?;
        drop(to_control);
        if let Some(steering) = steering {
            started.port_steering = steer(steering, &mut specs);
            if !started.port_steering {
                started.description = started.description.replace(", eBPF steering", "");
            }
        }
        serve(&cfg, Shards::start(specs)?, started)
    }
}

/// What [`run`] prepared for [`serve`], whichever data plane it started.
struct Started {
    settings: RtcSettings,
    access: Arc<control::auth::Access>,
    /// The TURN servers handed out (`--turn-url`), checked.
    ice_servers: Arc<control::turn::IceServers>,
    /// `--cluster` and its flags, checked.
    cluster: Option<config::ClusterSettings>,
    from_shards: mpsc::UnboundedReceiver<ToControl>,
    /// The advertised address.
    ip: IpAddr,
    /// The data plane's sockets, for the startup line.
    description: String,
    /// Whether the shared port's eBPF steering is on (shard/steer.rs).
    port_steering: bool,
}

/// The port layout in force and, for a shared port, the steering program
/// loaded (not yet attached). A shared port whose program cannot be loaded
/// falls back to a port per shard, with one warning: without steering
/// about (n-1)/n of the datagrams would take a hop between shards
/// (`--no-port-steering` asks for that knowingly).
fn port_layout(
    cfg: &Config,
    n: usize,
    work_stealing: bool,
) -> (PortLayout, Option<shard::steer::Steering>) {
    let layout = cfg.port_layout();
    if layout != PortLayout::Shared || work_stealing || n < 2 || cfg.no_port_steering {
        return (layout, None);
    }
    match shard::steer::Steering::load(cfg.steer_fails()) {
        Ok(s) => (layout, Some(s)),
        Err(e) => {
            tracing::warn!(
                "shared UDP port: cannot load the eBPF program that steers datagrams to their shards: {e}; \
                 falling back to a UDP port per shard ({}-{}: open them all in the firewall, \
                 or give corelay CAP_BPF and CAP_NET_ADMIN; --no-port-steering keeps one port without eBPF)",
                cfg.udp_port,
                cfg.udp_port as usize + n - 1
            );
            (PortLayout::PerShard, None)
        }
    }
}

/// Attaches the steering program to the shards' reuseport group and gives
/// each shard its writer of the flow map; whether steering is on. If it
/// cannot be attached (the program did load), the port stays shared
/// without it: the kernel's hash and the shards' hand-over.
fn steer(steering: shard::steer::Steering, specs: &mut [ShardSpec]) -> bool {
    let sockets: Vec<&std::net::UdpSocket> = specs.iter().map(|s| &s.socket).collect();
    match steering.attach(&sockets) {
        Ok(writers) => {
            for (spec, w) in specs.iter_mut().zip(writers) {
                spec.flows = Some(w);
            }
            true
        }
        Err(e) => {
            tracing::warn!(
                "shared UDP port: cannot attach the eBPF steering program: {e}; \
                 the kernel's hash spreads the flows and the shards hand over what is another's"
            );
            false
        }
    }
}

/// Runs the control thread over `plane` until ctrl-c or SIGTERM (or a
/// shard's failure with `--on-shard-failure exit`), then shuts it down.
fn serve<P: DataPlane>(
    cfg: &Config,
    plane: P,
    started: Started,
) -> Result<(), Box<dyn std::error::Error>> {
    let Started {
        settings,
        access,
        ice_servers,
        cluster,
        from_shards,
        ip,
        description,
        port_steering,
    } = started;
    // A shard may stand for several cores: the control thread sees one in
    // work-stealing mode, and it may host what the pinned shards would
    // together.
    let max_participants_per_shard = cfg
        .max_participants_per_shard
        .saturating_mul(plane.cores_per_shard());
    #[allow(clippy::disallowed_types, reason = "the control thread's state lock")]
    let state = Arc::new(std::sync::Mutex::new(State::new(
        settings,
        Limits {
            max_participants_per_shard,
            max_shard_load: cfg.max_shard_load,
            max_participants_per_room: cfg.max_participants_per_room,
            max_rooms: cfg.max_rooms,
        },
        plane.handles(),
    )));

    control::lock(&state).set_port_steering(port_steering);
    let (stall, queue) = cfg.recorder_faults();
    control::lock(&state).set_recordings(recorder::Recordings::new(
        recorder::Settings {
            dir: cfg.recordings_dir.clone(),
            max_active: cfg.max_recordings,
            queue,
            stall,
        },
        cfg.runtime != Runtime::WorkStealing,
    ));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(cfg.http)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.http))?;
        let http = listener.local_addr()?;
        let shown = if http.ip().is_unspecified() {
            SocketAddr::new(ip, http.port())
        } else {
            http
        };
        tracing::info!(
            "corelay listening: http://{shown} (API, demo page), {description}, {} video",
            cfg.video_codecs()
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        // The cluster's task: connects (in the background, retrying while
        // NATS cannot be reached) and announces this node every heartbeat.
        let cluster_task = cluster.map(|settings| {
            let http_addr = settings
                .advertise_http
                .clone()
                .unwrap_or_else(|| format!("http://{shown}"));
            let (url, node_id) = (settings.url.clone(), settings.node_id.clone());
            tracing::info!(node = %node_id, "cluster node, reached at {http_addr}");
            let wake = Arc::new(tokio::sync::Notify::new());
            let node = control::cluster::Node::new(settings, http_addr, wake.clone());
            control::lock(&state).set_cluster(node);
            tokio::spawn(control::cluster::run(state.clone(), url, node_id, wake))
        });
        let exit_on_failure = cfg.on_shard_failure == ShardFailure::Exit;
        let (fatal_tx, mut fatal_rx) = tokio::sync::oneshot::channel();
        let pump = tokio::spawn({
            let state = state.clone();
            async move {
                let failure = control::pump(state, from_shards, exit_on_failure).await;
                let _ = fatal_tx.send(failure);
            }
        });
        let metrics = if cfg.metrics == "off" {
            None
        } else {
            let addr: SocketAddr = cfg
                .metrics
                .parse()
                .map_err(|e| format!("--metrics {:?}: {e}", cfg.metrics))?;
            // Metrics are secondary: a taken port must not keep media down.
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    tracing::info!("Prometheus metrics on http://{}/metrics", l.local_addr()?);
                    let app = control::http::metrics_router(state.clone());
                    Some(tokio::spawn(async move {
                        let _ = axum::serve(l, app).await;
                    }))
                }
                Err(e) => {
                    tracing::warn!(
                        "metrics listener disabled: cannot listen on {addr}: {e} (set --metrics)"
                    );
                    None
                }
            }
        };
        let fatal = std::cell::Cell::new(None);
        let stop = async {
            tokio::select! {
                () = shutdown_signal() => {}
                Ok(Some(reason)) = &mut fatal_rx => fatal.set(Some(reason)),
            }
        };
        let limits = control::serve::ConnLimits {
            header_timeout: cfg.http_header_timeout,
            write_timeout: cfg.http_write_timeout,
            max_conns_per_ip: cfg.http_max_conns_per_ip,
            shutdown_timeout: cfg.shutdown_timeout,
        };
        let app = control::http::router(state.clone(), access).layer(axum::Extension(
            control::http::BodyLimits {
                max_bytes: cfg.max_sdp_bytes,
                timeout: cfg.http_body_timeout,
            },
        ))
        .layer(axum::Extension(ice_servers));
        // The deadline counts from the signal: HTTP connections and shards
        // share it, and the process exits when it passes whatever is left.
        let closed = control::serve::serve(listener, app, limits, async {
            stop.await;
            // Out of placement at once: the other nodes stop sending joins
            // here while this one closes.
            {
                let mut st = control::lock(&state);
                if let Some(node) = st.cluster_mut() {
                    node.start_draining();
                    // Those another node can take are sent there
                    // (`node_draining`), before the rest close.
                    st.drain_members();
                }
            }
            tracing::info!(
                "shutting down (deadline {:?}): closing every connection",
                cfg.shutdown_timeout
            );
        })
        .await;
        // Recordings end before the calls do: their taps withdrawn, their
        // files finalized (cues, duration, the MP4 index) within the
        // deadline.
        let recordings = control::lock(&state).stop_all_recordings();
        if !recordings.is_empty() {
            let n = recordings.len();
            let finished = tokio::time::timeout(
                cfg.shutdown_timeout,
                tokio::task::spawn_blocking(move || {
                    for r in recordings {
                        r.finish();
                    }
                }),
            )
            .await
            .is_ok();
            tracing::info!(recordings = n, finished, "recordings stopped for the shutdown");
        }
        let waits = control::lock(&state).shutdown();
        let shards_closed = tokio::time::timeout(cfg.shutdown_timeout, async {
            for w in waits {
                let _ = w.await;
            }
        })
        .await
        .is_ok();
        pump.abort();
        if let Some(m) = metrics {
            m.abort();
        }
        if let Some(task) = cluster_task {
            // No heartbeat after the leave: the others drop this node now.
            task.abort();
            control::cluster::leave(&state).await;
        }
        if let Some(reason) = fatal.take() {
            return Err(format!(
                "{reason}; exiting so that a supervisor restarts corelay (--on-shard-failure continue keeps serving on the other shards)"
            )
            .into());
        }
        Ok::<bool, Box<dyn std::error::Error>>(closed && shards_closed)
    });
    drop(rt);
    let clean = result?;
    drop(state);
    if !clean {
        tracing::warn!("exiting with connections or shards still open (shutdown deadline)");
    }
    plane.finish(clean);
    Ok(())
}

/// Binds the `n` pinned shards' sockets (thread-per-core) and describes
/// each shard.
fn shard_specs(
    cfg: &Config,
    n: usize,
    ip: IpAddr,
    layout: PortLayout,
    settings: &RtcSettings,
    to_control: &mpsc::UnboundedSender<ToControl>,
    cluster: Option<&config::ClusterSettings>,
) -> Result<Vec<ShardSpec>, Box<dyn std::error::Error>> {
    let mut specs = Vec::with_capacity(n);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let nofile = raise_nofile_limit();
    let tcp_max = shard::tcp::conns_per_shard(nofile, n);
    if !cfg.no_ice_tcp && tcp_max < shard::tcp::MAX_CONNS {
        tracing::info!(
            "ICE-TCP takes at most {tcp_max} connections per shard: the file descriptor limit is {nofile} (ulimit -n)"
        );
    }
    let mesh = Arc::new(Mesh::new(n));
    let source = reply_source(cfg.bind_ip, ip);
    let shared = layout == PortLayout::Shared;
    for i in 0..n {
        // ICE-TCP's port, and UDP's unless the shards share one.
        let port = cfg
            .udp_port
            .checked_add(i as u16)
            .ok_or("--udp-port + shard count exceeds 65535")?;
        let udp_port = if shared { cfg.udp_port } else { port };
        let socket = shard::bind_with(
            SocketAddr::new(cfg.bind_ip, udp_port),
            !cfg.no_packet_metrics,
            shared,
        )
        .map_err(|e| {
            format!(
                "cannot bind UDP {}:{udp_port} for shard {i}: {e}",
                cfg.bind_ip
            )
        })?;
        let tcp = if cfg.no_ice_tcp {
            None
        } else {
            let addr = SocketAddr::new(cfg.bind_ip, port);
            let l = shard::tcp::bind(addr).map_err(|e| {
                format!("cannot bind TCP {addr} for shard {i}'s ICE-TCP: {e} (--no-ice-tcp turns ICE-TCP off)")
            })?;
            Some(l)
        };
        // With --cluster: the shard's relay socket, at the relay port + i.
        let relay = match cluster {
            None => None,
            Some(c) => {
                let port = c
                    .relay_addr
                    .port()
                    .checked_add(i as u16)
                    .ok_or("--relay-addr's port + shard count exceeds 65535")?;
                let addr = SocketAddr::new(c.relay_addr.ip(), port);
                let socket = bind(addr, false).map_err(|e| {
                    format!("cannot bind the relay socket {addr} for shard {i} (--relay-addr must be an address of this host): {e}")
                })?;
                Some(shard::RelaySpec {
                    socket,
                    secret: c.secret.clone(),
                    node_id: c.node_id.clone(),
                    epoch: c.epoch,
                })
            }
        };
        specs.push(ShardSpec {
            relay,
            index: ShardId(i),
            socket,
            tcp,
            tcp_limits: shard::tcp::TcpLimits {
                max: tcp_max,
                max_per_ip: cfg.ice_tcp_max_conns_per_ip,
                auth_timeout: cfg.ice_tcp_auth_timeout,
            },
            advertised: SocketAddr::new(ip, udp_port),
            advertised_tcp: SocketAddr::new(ip, port),
            source,
            settings: settings.clone(),
            mesh: mesh.clone(),
            to_control: to_control.clone(),
            core: (!cfg.no_pin && n <= cores).then_some(i % cores),
            packet_metrics: !cfg.no_packet_metrics,
            offload: !cfg.no_udp_offload,
            flows: None,
        });
    }
    Ok(specs)
}

/// The address media sockets bound to `bind_ip` send from: `advertised`
/// when they are bound to a wildcard address and it is an address of this
/// host that the socket can send from (of the same family, or IPv4 on a
/// dual-stack `::` socket, whose IPv4 peers come as v4-mapped addresses
/// and whose answers to them go by IPv4), else none (the kernel picks).
/// A wildcard socket's answer otherwise leaves from whatever address the
/// route to the peer prefers, which on a host of several need not be the
/// one in the candidates, where the peer sent; ICE takes an answer only
/// from there (RFC 8445 §7.2.5.2.1). An advertised address that is not this
/// host's (behind a 1:1 NAT) cannot be a source, and the NAT maps the
/// answer back to it.
fn reply_source(bind_ip: IpAddr, advertised: IpAddr) -> Option<IpAddr> {
    let local = || std::net::UdpSocket::bind(SocketAddr::new(advertised, 0)).is_ok();
    // Only an IPv4 socket cannot send from an IPv6 address.
    let family = !(bind_ip.is_ipv4() && advertised.is_ipv6());
    let source = (bind_ip.is_unspecified() && family && local()).then_some(advertised);
    if let Some(src) = source {
        tracing::info!(
            "media sockets bound to {bind_ip} answer from {src}, the address in the candidates"
        );
    }
    source
}

/// Panics inside [`corelay_core::guard::isolate`] are caught and logged once,
/// with the participant they concern, by the code that caught them: the hook
/// only notes where they happened. Any other panic is logged at ERROR here.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        if corelay_core::guard::active() {
            corelay_core::guard::note_location(location);
            return;
        }
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("?"),
            "panic at {location}: {message}\n{}",
            std::backtrace::Backtrace::capture()
        );
    }));
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Raises the soft `nofile` limit to the hard one (every connection and
/// socket is a descriptor; distributions often start processes at 1024) and
/// returns the soft limit in force.
fn raise_nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    r.rlim_cur
}
