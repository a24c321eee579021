//! corelay, the server: one control thread (HTTP signaling, placement,
//! admission) and one pinned shard per core (the data plane).
//!
//! Layout: [`control`] is the control thread, [`shard`] the data plane, and
//! the sans-I/O core that both drive lives in the `corelay-core` crate.

pub mod config;
pub mod control;
pub mod shard;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use corelay_core::{RtcSettings, VideoCodec};
use tokio::sync::mpsc;

use crate::config::{CodecArg, Config};
use crate::control::{Limits, State};
use crate::shard::mesh::Mesh;
use crate::shard::{ShardSpec, bind, spawn};

/// Runs the server until ctrl-c or SIGTERM. Call from the main thread: it
/// becomes the control thread.
pub fn run(cfg: Config) -> Result<(), Box<dyn std::error::Error>> {
    str0m::crypto::from_feature_flags().install_process_default();
    let n = cfg.shard_count();
    let ip = cfg.advertised_ip();
    let settings = RtcSettings {
        video_codec: match cfg.video_codec {
            CodecArg::H264 => VideoCodec::H264,
            CodecArg::Vp8 => VideoCodec::Vp8,
        },
    };
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mesh = Arc::new(Mesh::new(n));
    let (to_control, from_shards) = mpsc::unbounded_channel();
    let mut handles = Vec::with_capacity(n);
    let mut joins = Vec::with_capacity(n);
    for i in 0..n {
        let port = cfg
            .udp_port
            .checked_add(i as u16)
            .ok_or("--udp-port + shard count exceeds 65535")?;
        let socket = bind(SocketAddr::new(cfg.bind_ip, port), !cfg.no_packet_metrics)
            .map_err(|e| format!("cannot bind UDP {}:{port} for shard {i}: {e}", cfg.bind_ip))?;
        let (h, j) = spawn(ShardSpec {
            index: i,
            socket,
            advertised: SocketAddr::new(ip, port),
            settings: settings.clone(),
            mesh: mesh.clone(),
            to_control: to_control.clone(),
            core: (!cfg.no_pin && n <= cores).then_some(i % cores),
            packet_metrics: !cfg.no_packet_metrics,
            stall: cfg
                .test_stall_every
                .map(|every| (every, Duration::from_millis(cfg.test_stall_ms))),
        })?;
        handles.push(h);
        joins.push(j);
    }
    drop(to_control);
    #[allow(clippy::disallowed_types, reason = "the control thread's state lock")]
    let state = Arc::new(std::sync::Mutex::new(State::new(
        settings,
        Limits {
            max_participants_per_shard: cfg.max_participants_per_shard,
            max_shard_load: cfg.max_shard_load,
        },
        handles,
    )));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
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
            "corelay listening: http://{shown} (API, demo page), UDP {ip}:{}-{} ({n} shards), {} video",
            cfg.udp_port,
            cfg.udp_port as usize + n - 1,
            match cfg.video_codec {
                CodecArg::H264 => "H264",
                CodecArg::Vp8 => "VP8",
            }
        );
        let pump = tokio::spawn(control::pump(state.clone(), from_shards));
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
        axum::serve(listener, control::http::router(state.clone()))
            .with_graceful_shutdown(shutdown_signal())
            .await?;
        tracing::info!("shutting down: closing every connection");
        let waits = control::lock(&state).shutdown();
        for w in waits {
            let _ = tokio::time::timeout(Duration::from_secs(2), w).await;
        }
        pump.abort();
        if let Some(m) = metrics {
            m.abort();
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    drop(state);
    for j in joins {
        let _ = j.join();
    }
    Ok(())
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
