//! Sanity checks of the checked-in captures in
//! `crates/core/tests/fixtures/svc/`: each parses by the `.crtp` format and
//! really is the SVC stream it is named after.

use std::collections::BTreeSet;
use std::path::PathBuf;

use svc_capture::fixture::{Record, read};

fn load(name: &str) -> Vec<Record> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/svc")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() < 1_600_000, "{name}: {} bytes", bytes.len());
    let recs = read(&bytes);
    assert!(!recs.is_empty(), "{name}: no packets");
    recs
}

/// What holds for both: one SSRC, one payload type, a DD on every packet
/// whose first carries the template structure, one marker per frame
/// (RTP timestamp), no empty payload, sequence numbers without a gap.
fn common(name: &str, recs: &[Record], pt: u8) {
    let ssrcs: BTreeSet<u32> = recs.iter().map(|r| r.ssrc).collect();
    let pts: BTreeSet<u8> = recs.iter().map(|r| r.pt).collect();
    let frames: BTreeSet<u32> = recs.iter().map(|r| r.timestamp).collect();
    let with_dd = recs.iter().filter(|r| r.dd.is_some()).count();
    let markers = recs.iter().filter(|r| r.marker).count();
    eprintln!(
        "{name}: {} packets, {} frames, pts {pts:?}, ssrcs {ssrcs:?}, {with_dd} with DD, {markers} markers, first payload {:02x?}",
        recs.len(),
        frames.len(),
        &recs[0].payload[..8],
    );
    assert_eq!(ssrcs.len(), 1, "{name}: ssrcs {ssrcs:?}");
    assert_eq!(pts, BTreeSet::from([pt]), "{name}");
    assert_eq!(with_dd, recs.len(), "{name}: every packet carries a DD");
    let dd0 = recs[0].dd.as_ref().unwrap();
    assert!(
        dd0.len() > 3 && dd0[0] & 0x80 != 0 && dd0[3] & 0x80 != 0,
        "{name}: first DD starts a frame and carries the template structure: {dd0:02x?}"
    );
    assert_eq!(markers, frames.len(), "{name}: one marker per frame");
    assert!(recs.iter().all(|r| !r.payload.is_empty()), "{name}");
    for w in recs.windows(2) {
        assert_eq!(w[1].seq, w[0].seq.wrapping_add(1), "{name}: gap or reorder");
    }
}

#[test]
fn vp9_l3t3_key() {
    let name = "vp9-l3t3-key.crtp";
    let recs = load(name);
    common(name, &recs, 98);
    // VP9 payload descriptor (RFC 9628): I P L F B E V Z, picture id, then
    // the layer indices TID U SID D.
    let mut layers = BTreeSet::new();
    for r in &recs {
        let b0 = r.payload[0];
        assert!(b0 & 0x80 != 0 && b0 & 0x20 != 0, "I and L set: {b0:08b}");
        let at = if r.payload[1] & 0x80 != 0 { 3 } else { 2 };
        let l = r.payload[at];
        layers.insert((l >> 1 & 7, l >> 5));
    }
    let p0 = &recs[0].payload;
    assert!(
        p0[0] & 0x40 == 0 && p0[0] & 0x08 != 0 && p0[0] & 0x02 != 0,
        "starts with a key frame's first packet carrying the SS"
    );
    let want: BTreeSet<(u8, u8)> = (0..3).flat_map(|s| (0..3).map(move |t| (s, t))).collect();
    assert_eq!(layers, want, "(spatial, temporal) ids seen");
}

#[test]
fn av1_l3t3() {
    let name = "av1-l3t3.crtp";
    let recs = load(name);
    common(name, &recs, 45);
    // AV1 aggregation header Z Y W(2) N; the first OBU element of a packet
    // that does not continue a fragment starts with an OBU header, whose
    // extension holds temporal_id(3) spatial_id(2).
    assert!(
        recs[0].payload[0] & 0x08 != 0,
        "N: starts a coded video sequence"
    );
    let mut layers = BTreeSet::new();
    for r in recs.iter().filter(|r| r.payload[0] & 0x80 == 0) {
        let mut at = 1;
        if r.payload[0] >> 4 & 3 == 0 {
            while r.payload[at] & 0x80 != 0 {
                at += 1;
            }
            at += 1;
        }
        let h = r.payload[at];
        if h & 0x04 != 0 {
            let e = r.payload[at + 1];
            layers.insert((e >> 3 & 3, e >> 5));
        }
    }
    let want: BTreeSet<(u8, u8)> = (0..3).flat_map(|s| (0..3).map(move |t| (s, t))).collect();
    assert_eq!(layers, want, "(spatial, temporal) ids seen");
}
