//! Turn an H.264 Annex-B elementary stream into the packetized frame file
//! publishers replay (`corelay-bench packetize`). Packetization follows RFC
//! 6184 mode 1 the way libwebrtc does it: small NAL units (SPS, PPS, SEI)
//! aggregated into STAP-A, NAL units larger than the MTU split into FU-A
//! fragments of equal size, the rest as single NAL unit packets.

use std::fmt::Write as _;

/// One NAL unit (without start code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nal<'a> {
    /// NAL unit type (5 bits).
    pub ty: u8,
    /// Bytes including the NAL header.
    pub data: &'a [u8],
}

/// Split an Annex-B stream at 3- and 4-byte start codes.
pub fn split_nals(b: &[u8]) -> Vec<Nal<'_>> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= b.len() {
        if b[i] == 0 && b[i + 1] == 0 && b[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let mut end = starts.get(k + 1).map(|&n| n - 3).unwrap_or(b.len());
        // A 4-byte start code leaves a trailing zero on the previous NAL.
        while end > s && b[end - 1] == 0 {
            end -= 1;
        }
        if end > s {
            out.push(Nal {
                ty: b[s] & 0x1f,
                data: &b[s..end],
            });
        }
    }
    out
}

/// first_mb_in_slice == 0: the first bit of the slice header (ue(v) 0 is "1").
fn first_slice_of_picture(n: &Nal<'_>) -> bool {
    n.data.get(1).is_some_and(|b| b & 0x80 != 0)
}

/// Group NAL units into access units (frames): a new frame starts at an
/// AUD, at SPS/PPS/SEI after a slice, or at a slice with first_mb_in_slice == 0.
pub fn access_units<'a>(nals: &[Nal<'a>]) -> Vec<Vec<Nal<'a>>> {
    let mut aus: Vec<Vec<Nal<'a>>> = Vec::new();
    let mut cur: Vec<Nal<'a>> = Vec::new();
    let mut cur_has_slice = false;
    for n in nals {
        let is_slice = n.ty == 1 || n.ty == 5;
        let starts_new = match n.ty {
            9 => true,
            6..=8 => cur_has_slice,
            1 | 5 => cur_has_slice && first_slice_of_picture(n),
            _ => false,
        };
        if starts_new && !cur.is_empty() {
            aus.push(std::mem::take(&mut cur));
            cur_has_slice = false;
        }
        // AUD and filler data are not sent over RTP.
        if n.ty != 9 && n.ty != 12 {
            cur.push(*n);
        }
        cur_has_slice |= is_slice;
    }
    if !cur.is_empty() {
        aus.push(cur);
    }
    aus.retain(|au| au.iter().any(|n| n.ty == 1 || n.ty == 5));
    aus
}

/// RTP payload sizes of one access unit at `mtu` (max payload bytes).
pub fn packet_sizes(au: &[Nal<'_>], mtu: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stap: Vec<usize> = Vec::new();
    let stap_size = |v: &[usize]| 1 + v.iter().map(|l| 2 + l).sum::<usize>();
    let flush_stap = |stap: &mut Vec<usize>, out: &mut Vec<usize>| {
        match stap.len() {
            0 => {}
            1 => out.push(stap[0]),
            _ => out.push(1 + stap.iter().map(|l| 2 + l).sum::<usize>()),
        }
        stap.clear();
    };
    for n in au {
        let len = n.data.len();
        if len > mtu {
            flush_stap(&mut stap, &mut out);
            // FU-A: 2 header bytes per fragment, the NAL header byte is not repeated.
            let body = len - 1;
            let cap = mtu - 2;
            let k = body.div_ceil(cap);
            let base = body / k;
            let rem = body % k;
            for i in 0..k {
                out.push(2 + base + usize::from(i < rem));
            }
        } else {
            let mut with = stap.clone();
            with.push(len);
            if stap_size(&with) <= mtu {
                stap = with;
            } else {
                flush_stap(&mut stap, &mut out);
                stap.push(len);
            }
        }
    }
    flush_stap(&mut stap, &mut out);
    out
}

/// Render the frame file for an Annex-B stream.
pub fn frame_file(stream: &[u8], fps: u32, mtu: usize, source: &str) -> Result<String, String> {
    if !(1..=240).contains(&fps) {
        return Err("fps must be 1..=240".into());
    }
    if !(100..=1200).contains(&mtu) {
        return Err("mtu must be 100..=1200".into());
    }
    let nals = split_nals(stream);
    let aus = access_units(&nals);
    if aus.is_empty() {
        return Err("no H.264 frames found (expected an Annex-B elementary stream)".into());
    }
    let first_key = aus
        .iter()
        .position(|au| au.iter().any(|n| n.ty == 5))
        .ok_or("no IDR frame in the stream")?;
    let ticks = 90_000 / fps;
    let mut text = String::new();
    let mut bytes = 0usize;
    let mut keys = 0;
    let mut body = String::new();
    for (i, au) in aus[first_key..].iter().enumerate() {
        let key = au.iter().any(|n| n.ty == 5);
        keys += usize::from(key);
        let sizes = packet_sizes(au, mtu);
        bytes += sizes.iter().sum::<usize>();
        let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(
            body,
            "{} {} {}",
            i as u64 * u64::from(ticks),
            if key { 'K' } else { 'D' },
            list.join(",")
        );
    }
    let frames = aus.len() - first_key;
    let secs = frames as f64 / f64::from(fps);
    let _ = writeln!(
        text,
        "# corelay-frames v1 codec=h264 clock=90000 fps={fps} mtu={mtu}"
    );
    let _ = writeln!(
        text,
        "# source: {source}; {frames} frames, {keys} keyframes, {:.0} kbps RTP payload",
        bytes as f64 * 8.0 / secs / 1000.0
    );
    let _ = writeln!(text, "# <rtp ts 90kHz> <K=IDR|D> <rtp payload sizes>");
    text.push_str(&body);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nal(ty: u8, len: usize, first_mb0: bool) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, 0x60 | ty];
        v.push(if first_mb0 { 0x88 } else { 0x08 });
        v.resize(4 + len, 0xAB);
        v
    }

    #[test]
    fn groups_and_packetizes() {
        let mut s = Vec::new();
        s.extend(nal(9, 2, true));
        s.extend(nal(7, 20, true));
        s.extend(nal(8, 6, true));
        s.extend(nal(5, 3000, true));
        s.extend(nal(1, 700, true));
        s.extend(nal(1, 1500, true));
        s.extend(nal(1, 500, false)); // second slice of the same picture
        let nals = split_nals(&s);
        assert_eq!(nals.len(), 7);
        assert_eq!(nals[3].data.len(), 3000);
        let aus = access_units(&nals);
        assert_eq!(aus.len(), 3);
        assert_eq!(aus[0].len(), 3); // AUD dropped
        assert_eq!(aus[2].len(), 2);
        let p = packet_sizes(&aus[0], 1200);
        // STAP-A(SPS 20, PPS 6) = 1 + 22 + 8 = 31, then 3 FU-A fragments of 2999 bytes.
        assert_eq!(p[0], 31);
        assert_eq!(p[1..].iter().map(|x| x - 2).sum::<usize>(), 2999);
        assert!(p.iter().all(|&x| x <= 1200));
        assert_eq!(packet_sizes(&aus[1], 1200), vec![700]);
        // Slice of 1500 fragments, the 500-byte slice goes alone.
        assert_eq!(packet_sizes(&aus[2], 1200), vec![752, 751, 500]);
        let text = frame_file(&s, 30, 1200, "test").unwrap();
        let r = corelay_client::Recording::parse(&text).unwrap();
        assert_eq!(r.frames.len(), 3);
        assert!(r.frames[0].keyframe);
        assert_eq!(r.frames[1].ts, 3000);
        assert!(frame_file(&[1, 2, 3], 30, 1200, "x").is_err());
    }
}
