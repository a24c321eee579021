//! Test harness: starts the real `corelay` binary on free loopback ports and
//! stops it (SIGTERM) when dropped. All traffic stays on 127.0.0.1.
#![allow(dead_code)]

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corelay_client::{JoinSpec, ParticipantHandle, Snapshot};

pub struct Server {
    pub child: Child,
    pub http: String,
    pub metrics: String,
    pub udp_base: u16,
    pub shards: usize,
}

/// A free TCP port and a run of `n` free UDP ports (best effort: probe then release).
fn free_ports(n: usize) -> (u16, u16) {
    let http = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for _ in 0..200 {
        let base = fastrand::u16(20_000..60_000);
        let ok = (0..n as u16).all(|i| UdpSocket::bind(("0.0.0.0", base + i)).is_ok());
        if ok {
            return (http, base);
        }
    }
    panic!("no free UDP port range");
}

impl Server {
    pub fn start(shards: usize, extra: &[&str]) -> Server {
        let (http_port, udp_base) = free_ports(shards);
        let http = format!("127.0.0.1:{http_port}");
        let metrics_port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let metrics = format!("127.0.0.1:{metrics_port}");
        let child = Command::new(env!("CARGO_BIN_EXE_corelay"))
            .args([
                "--http",
                &http,
                "--public-ip",
                "127.0.0.1",
                "--bind-ip",
                "127.0.0.1",
            ])
            .args(["--udp-port", &udp_base.to_string(), "--metrics", &metrics])
            .args([
                "--shards",
                &shards.to_string(),
                "--no-pin",
                "--log",
                &std::env::var("CORELAY_TEST_LOG").unwrap_or("warn".into()),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start corelay");
        let s = Server {
            child,
            http,
            metrics,
            udp_base,
            shards,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while ureq::get(&s.url("/healthz")).call().is_err() {
            assert!(Instant::now() < deadline, "corelay did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.http)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let body = ureq::get(&self.url(path))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// Any request; returns (status, headers as lowercase name -> value, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut res = agent.run(req.body(body.to_string()).unwrap()).unwrap();
        let status = res.status().as_u16();
        let hs = res
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = res.body_mut().read_to_string().unwrap_or_default();
        (status, hs, body)
    }

    pub fn scrape(&self) -> String {
        ureq::get(&format!("http://{}/metrics", self.metrics))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap()
    }

    pub fn stats_total(&self, field: &str) -> u64 {
        self.get_json("/api/v1/stats")["total"][field]
            .as_u64()
            .unwrap()
    }

    /// Waits up to `timeout` for a shard report in which `pred` holds.
    pub fn wait_stats(
        &self,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.get_json("/api/v1/stats");
            if pred(&s) || Instant::now() > deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM and the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "corelay did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn join(server: &Server, room: &str, name: &str) -> ParticipantHandle {
    corelay_client::join(JoinSpec::new(server.base(), room, name)).expect("join")
}

pub fn join_with(
    server: &Server,
    room: &str,
    name: &str,
    f: impl FnOnce(&mut JoinSpec),
) -> ParticipantHandle {
    let mut spec = JoinSpec::new(server.base(), room, name);
    f(&mut spec);
    corelay_client::join(spec).expect("join")
}

/// Video slots that have received at least `frames` frames, with their source names.
pub fn video_sources(s: &Snapshot, frames: u64) -> Vec<String> {
    let mut v: Vec<String> = s
        .slots
        .values()
        .filter(|st| st.kind == "video" && st.frames >= frames)
        .filter_map(|st| st.last_source.clone())
        .collect();
    v.sort();
    v
}

pub fn audio_sources(s: &Snapshot, frames: u64) -> Vec<String> {
    let mut v: Vec<String> = s
        .slots
        .values()
        .filter(|st| st.kind == "audio" && st.frames >= frames)
        .filter_map(|st| st.last_source.clone())
        .collect();
    v.sort();
    v
}

/// Every slot's stream is intact: no corrupt payload, nothing out of order,
/// no timestamp going back, abs-capture-time carried unchanged on video.
pub fn assert_clean(who: &str, s: &Snapshot) {
    for (mid, st) in &s.slots {
        assert_eq!(st.corrupt, 0, "{who} slot {mid}: corrupt payloads: {st:?}");
        assert_eq!(st.out_of_order, 0, "{who} slot {mid}: out of order: {st:?}");
        assert_eq!(
            st.ts_backwards, 0,
            "{who} slot {mid}: timestamp went back: {st:?}"
        );
        if st.kind == "video" && st.packets > 0 {
            assert_eq!(
                st.abs_capture_mismatch, 0,
                "{who} slot {mid}: abs-capture-time changed"
            );
            assert_eq!(
                st.abs_capture_missing, 0,
                "{who} slot {mid}: abs-capture-time missing"
            );
        }
    }
}

pub fn names(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}
