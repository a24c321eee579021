//! Recording (issue 53, item 3), end to end against the real binary:
//! `POST /api/v1/rooms/{room}/recordings` records every published track of
//! a call of load-client participants (real UDP, DTLS, SRTP) into one WebM
//! file per track; `DELETE` finalizes them; `ffprobe` reads each file's
//! duration within 1 s of the call's, and `ffmpeg` reads every packet of it
//! without an error. A recorder on a full disk (a 1 MiB tmpfs) keeps the
//! call going and reports the failure; one that falls behind (a hung disk:
//! `--test-recorder-stall-ms`) drops, counts and marks the gap while the
//! call goes on; a shutdown finalizes the files; only an admin may record.
//!
//! The load client's payloads are synthetic (verifiable stamps behind real
//! VP8 and Opus headers), so here ffmpeg demuxes every packet (`-c copy`)
//! rather than decoding it, and H.264 is not tried (its synthetic frames
//! have no SPS and PPS for an MP4 track); tests/browser/recording.test.mjs
//! records Chromium's real VP8, H.264 and Opus and decodes every frame.
//!
//! ffmpeg and ffprobe are Debian's (`apt-get install ffmpeg`, done by
//! scripts/test); where they are missing the test fails, unless
//! SKIP_FFMPEG=1.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use corelay_client::VideoCodec;
use corelay_client::signal::mint_claims;
use corelay_testkit::say;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = std::env::temp_dir().join(format!("corelay-rec-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

/// Whether ffmpeg and ffprobe run; false only under SKIP_FFMPEG=1.
fn have_ffmpeg() -> bool {
    let ok = ["ffmpeg", "ffprobe"].iter().all(|b| {
        Command::new(b)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        assert!(
            std::env::var("SKIP_FFMPEG").as_deref() == Ok("1"),
            "ffmpeg/ffprobe are missing (apt-get install ffmpeg, or SKIP_FFMPEG=1)"
        );
    }
    ok
}

fn ffprobe_duration(f: &Path) -> f64 {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(f)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "ffprobe {}: {}",
        f.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    text.parse()
        .unwrap_or_else(|_| panic!("ffprobe {}: no duration in {text:?}", f.display()))
}

/// ffmpeg reads every packet of `f` (`decode`: and decodes every frame);
/// returns its error output (empty when clean).
fn ffmpeg_errors(f: &Path, decode: bool) -> String {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-i"]).arg(f);
    if !decode {
        cmd.args(["-c", "copy"]);
    }
    let out = cmd.args(["-f", "null", "-"]).output().unwrap();
    let mut errors = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        errors.push_str(&format!(" (exit {:?})", out.status.code()));
    }
    errors
}

fn vp8(spec: &mut corelay_client::JoinSpec) {
    spec.participant.codec = VideoCodec::Vp8;
}

fn recording_events(p: &corelay_client::ParticipantHandle) -> Vec<Value> {
    p.snapshot()
        .events
        .into_iter()
        .filter(|e| e["type"] == "recording")
        .collect()
}

#[test]
fn a_recorded_call_gives_one_playable_file_per_track() {
    let dir = scratch_dir("call");
    let server = start_server(1, &["--recordings-dir", dir.to_str().unwrap()]);
    let (status, headers, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 201, "{body}");
    let rec = json_of(&body);
    let id = rec["id"].as_str().unwrap().to_string();
    assert_eq!(rec["state"], "recording");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "location" && v.ends_with(&format!("/recordings/{id}"))),
        "{headers:?}"
    );
    // The same room twice: 409.
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 409, "{body}");
    assert_eq!(json_of(&body)["code"], "already_recording");

    let a = join_with(&server, "r1", "a", vp8);
    let b = join_with(&server, "r1", "b", vp8);
    let (ok, _) = a.wait_until(WAIT, |s| video_sources(s, 1) == names(&["b"]));
    assert!(ok, "a does not receive b");
    let flowing = Instant::now();
    // A member learns the room is recorded when it joins.
    let (ok, _) = b.wait_until(WAIT, |s| {
        s.events
            .iter()
            .any(|e| e["type"] == "recording" && e["active"] == true && e["id"] == id.as_str())
    });
    assert!(ok, "b got no recording event: {:?}", recording_events(&b));
    std::thread::sleep(Duration::from_secs(5));

    let (status, _, body) = server.request("GET", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 200, "{body}");
    let listed = json_of(&body);
    assert_eq!(listed["recordings"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["recordings"][0]["state"], "recording", "{listed}");

    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &[],
        "",
    );
    let call = flowing.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{body}");
    let done = json_of(&body);
    assert_eq!(done["state"], "stopped", "{done:#}");
    assert_eq!(done["error"], Value::Null, "{done:#}");
    let files = done["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "two publishers' video and audio: {done:#}");
    let rec_dir = PathBuf::from(done["dir"].as_str().unwrap());
    assert!(rec_dir.starts_with(&dir));
    let sidecar = json_of(&std::fs::read_to_string(rec_dir.join("recording.json")).unwrap());
    assert_eq!(sidecar["files"].as_array().unwrap().len(), 4, "{sidecar:#}");

    let (ok, _) = a.wait_until(WAIT, |s| {
        s.events
            .iter()
            .any(|e| e["type"] == "recording" && e["active"] == false)
    });
    assert!(ok, "a was not told the recording stopped");
    assert!(server.stats_total("recording_queued") > 0);
    assert_eq!(server.stats_total("recording_dropped"), 0);

    let ffmpeg = have_ffmpeg();
    for f in files {
        let name = f["file"].as_str().unwrap();
        assert!(name.ends_with(".webm"), "{f}");
        assert_eq!(f["error"], Value::Null, "{f}");
        assert!(f["frames"].as_u64().unwrap() > 50, "{f}");
        let path = rec_dir.join(name);
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(f["bytes"].as_u64(), Some(size), "{f}");
        if !ffmpeg {
            say(&format!("SKIPPED ffprobe/ffmpeg of {name} (SKIP_FFMPEG=1)"));
            continue;
        }
        let probed = ffprobe_duration(&path);
        say(&format!(
            "{name}: {size} bytes, ffprobe {probed:.2} s, the call {call:.2} s"
        ));
        assert!(
            (probed - call).abs() <= 1.0,
            "{name}: ffprobe says {probed} s, the call lasted {call} s"
        );
        let errors = ffmpeg_errors(&path, false);
        assert!(errors.is_empty(), "{name}: ffmpeg: {errors}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_an_admin_records_and_the_limits_hold() {
    const SECRET: &str = "recording-test-secret-0123456789";
    let dir = scratch_dir("auth");
    let server = start_server(
        1,
        &[
            "--auth-secret",
            SECRET,
            "--recordings-dir",
            dir.to_str().unwrap(),
            "--max-recordings",
            "1",
        ],
    );
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let user = mint_claims(
        SECRET.as_bytes(),
        &json!({"sub": "alice", "room": "r1", "exp": exp}),
    )
    .unwrap();
    let admin = mint_claims(
        SECRET.as_bytes(),
        &json!({"sub": "ops", "admin": true, "exp": exp}),
    )
    .unwrap();
    let bearer = |t: &str| format!("Bearer {t}");
    for method in ["POST", "GET"] {
        let (status, _, body) = server.request(method, "/api/v1/rooms/r1/recordings", &[], "");
        assert_eq!(status, 401, "{method} without a token: {body}");
        assert!(json_of(&body)["code"].is_string());
        let (status, _, body) = server.request(
            method,
            "/api/v1/rooms/r1/recordings",
            &[("authorization", &bearer(&user))],
            "",
        );
        assert_eq!(status, 403, "{method} with a participant's token: {body}");
        assert!(json_of(&body)["code"].is_string());
    }
    let admin_h = [("authorization", bearer(&admin))];
    let admin_h: Vec<(&str, &str)> = admin_h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &admin_h, "");
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    // --max-recordings 1: another room waits.
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r2/recordings", &admin_h, "");
    assert_eq!(status, 429, "{body}");
    assert_eq!(json_of(&body)["code"], "too_many_recordings");
    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &[("authorization", &bearer(&user))],
        "",
    );
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &admin_h,
        "",
    );
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &admin_h,
        "",
    );
    assert_eq!(status, 404, "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_directory_is_refused_with_a_reason() {
    let dir = scratch_dir("ro");
    // A file where the directory should be: nothing can be made under it.
    let blocked = dir.join("not-a-dir");
    std::fs::write(&blocked, b"x").unwrap();
    let server = start_server(1, &["--recordings-dir", blocked.to_str().unwrap()]);
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 409, "{body}");
    let e = json_of(&body);
    assert_eq!(e["code"], "recording_unavailable", "{e}");
    assert!(e["message"].as_str().unwrap().contains("not-a-dir"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Unmounts the tmpfs when the test ends, passed or not.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_disk_keeps_the_call_going_and_reports_the_failure() {
    let dir = scratch_dir("full");
    let mounted = is_root()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
    if !mounted {
        say(
            "SKIPPED a_full_disk_keeps_the_call_going_and_reports_the_failure (needs root to mount a tmpfs)",
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let _guard = Mounted(dir.clone());
    let server = start_server(1, &["--recordings-dir", dir.to_str().unwrap()]);
    let a = join_with(&server, "r1", "a", vp8);
    let b = join_with(&server, "r1", "b", vp8);
    let (ok, _) = a.wait_until(WAIT, |s| video_sources(s, 20) == names(&["b"]));
    assert!(ok, "a does not receive b");
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    // The call's media fill the 1 MiB within seconds.
    let deadline = Instant::now() + Duration::from_secs(40);
    let failure = loop {
        let list = server.get_json("/api/v1/rooms/r1/recordings");
        if let Some(e) = list["recordings"][0]["error"].as_str() {
            break e.to_string();
        }
        assert!(Instant::now() < deadline, "no failure reported: {list:#}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        failure.contains("No space left on device"),
        "the failure names its cause: {failure}"
    );
    // The room is told, and the call goes on.
    let (ok, _) = b.wait_until(WAIT, |s| {
        s.events
            .iter()
            .any(|e| e["type"] == "recording" && e["active"] == true && e["error"].is_string())
    });
    assert!(ok, "b was not told: {:?}", recording_events(&b));
    both_keep_flowing(&server, &a, &b);
    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &[],
        "",
    );
    assert_eq!(status, 200, "{body}");
    let done = json_of(&body);
    assert_eq!(done["state"], "failed", "{done:#}");
    both_keep_flowing(&server, &a, &b);
}

#[test]
fn a_shutdown_finalizes_the_running_recordings() {
    let dir = scratch_dir("shutdown");
    let server = start_server(1, &["--recordings-dir", dir.to_str().unwrap()]);
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 201, "{body}");
    let rec_dir = PathBuf::from(json_of(&body)["dir"].as_str().unwrap());
    let a = join_with(&server, "r1", "a", vp8);
    let b = join_with(&server, "r1", "b", vp8);
    let (ok, _) = a.wait_until(WAIT, |s| video_sources(s, 1) == names(&["b"]));
    assert!(ok, "a does not receive b");
    let flowing = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let call = flowing.elapsed().as_secs_f64();
    // SIGTERM: the recording stops and its files are finalized before the
    // process exits.
    assert!(server.stop().success());
    drop((a, b));
    let sidecar = json_of(&std::fs::read_to_string(rec_dir.join("recording.json")).unwrap());
    assert_eq!(sidecar["state"], "stopped", "{sidecar:#}");
    let files = sidecar["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "{sidecar:#}");
    if have_ffmpeg() {
        for f in files {
            let path = rec_dir.join(f["file"].as_str().unwrap());
            let probed = ffprobe_duration(&path);
            assert!(
                (probed - call).abs() <= 1.0,
                "{}: ffprobe says {probed} s, the call lasted {call} s",
                path.display()
            );
            let errors = ffmpeg_errors(&path, false);
            assert!(errors.is_empty(), "{}: ffmpeg: {errors}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recorder_that_falls_behind_drops_counts_and_marks_the_gap() {
    let dir = scratch_dir("behind");
    // A hung disk: the recorder stops for 3 s after its first packet, and
    // its queue holds 128 packets.
    let server = start_server(
        1,
        &[
            "--recordings-dir",
            dir.to_str().unwrap(),
            "--test-recorder-stall-ms",
            "3000",
            "--test-recording-queue",
            "128",
        ],
    );
    let (status, _, body) = server.request("POST", "/api/v1/rooms/r1/recordings", &[], "");
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    let a = join_with(&server, "r1", "a", vp8);
    let b = join_with(&server, "r1", "b", vp8);
    let (ok, _) = a.wait_until(WAIT, |s| video_sources(s, 1) == names(&["b"]));
    assert!(ok, "a does not receive b");
    let flowing = Instant::now();
    // The call goes on while the recorder is stuck.
    both_keep_flowing(&server, &a, &b);
    std::thread::sleep(Duration::from_secs(5).saturating_sub(flowing.elapsed()));
    assert!(server.stats_total("recording_dropped") > 0);
    let (status, _, body) = server.request(
        "DELETE",
        &format!("/api/v1/rooms/r1/recordings/{id}"),
        &[],
        "",
    );
    let call = flowing.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{body}");
    let done = json_of(&body);
    assert_eq!(done["state"], "stopped", "{done:#}");
    assert!(done["dropped_packets"].as_u64().unwrap() > 0, "{done:#}");
    let files = done["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "{done:#}");
    let behind = files
        .iter()
        .flat_map(|f| f["gaps"].as_array().unwrap())
        .filter(|g| g["reason"] == "recorder_behind")
        .count();
    assert!(behind > 0, "no gap marked recorder_behind: {done:#}");
    let rec_dir = PathBuf::from(done["dir"].as_str().unwrap());
    if have_ffmpeg() {
        for f in files {
            let path = rec_dir.join(f["file"].as_str().unwrap());
            let probed = ffprobe_duration(&path);
            say(&format!(
                "{}: ffprobe {probed:.2} s, the call {call:.2} s, gaps {}",
                path.display(),
                f["gaps"]
            ));
            assert!((probed - call).abs() <= 1.0, "{f}: ffprobe {probed} s");
            let errors = ffmpeg_errors(&path, false);
            assert!(errors.is_empty(), "{}: ffmpeg: {errors}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
