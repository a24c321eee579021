//! Reader (and writer) of the `.crtp` RTP capture format; the format is
//! specified in `crates/core/tests/fixtures/svc/README.md`.
//!
//! ```text
//! magic "CRTP1\n"
//! records until end of file:
//!   u8 marker, u8 pt, u16 seq, u32 timestamp, u32 ssrc,
//!   u16 dd_len, dd_len bytes of dependency descriptor (0: none),
//!   u16 payload_len, payload_len bytes of RTP payload (padding removed)
//! all integers big-endian
//! ```

/// The file's first bytes.
pub const MAGIC: &[u8] = b"CRTP1\n";

/// One received RTP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub marker: bool,
    pub pt: u8,
    pub seq: u16,
    pub timestamp: u32,
    pub ssrc: u32,
    /// The dependency descriptor header extension's bytes, if the packet
    /// carried one.
    pub dd: Option<Vec<u8>>,
    /// The RTP payload: after the header and extensions, padding removed.
    pub payload: Vec<u8>,
}

/// Parses a whole capture; panics on a malformed one (for tests).
pub fn read(bytes: &[u8]) -> Vec<Record> {
    try_read(bytes).unwrap_or_else(|e| panic!("malformed .crtp capture: {e}"))
}

/// Parses a whole capture.
pub fn try_read(bytes: &[u8]) -> Result<Vec<Record>, String> {
    let mut rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| "no CRTP1 magic".to_string())?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let at = bytes.len() - rest.len();
        let short = |what: &str| format!("record {} at byte {at}: truncated {what}", out.len());
        let fixed = take(&mut rest, 12).ok_or_else(|| short("header"))?;
        let dd_len = u16::from_be_bytes(
            take(&mut rest, 2)
                .ok_or_else(|| short("dd_len"))?
                .try_into()
                .unwrap(),
        );
        let dd = take(&mut rest, dd_len as usize).ok_or_else(|| short("dd"))?;
        let payload_len = u16::from_be_bytes(
            take(&mut rest, 2)
                .ok_or_else(|| short("payload_len"))?
                .try_into()
                .unwrap(),
        );
        let payload = take(&mut rest, payload_len as usize).ok_or_else(|| short("payload"))?;
        if fixed[0] > 1 {
            return Err(format!(
                "record {} at byte {at}: marker byte {}",
                out.len(),
                fixed[0]
            ));
        }
        out.push(Record {
            marker: fixed[0] == 1,
            pt: fixed[1],
            seq: u16::from_be_bytes([fixed[2], fixed[3]]),
            timestamp: u32::from_be_bytes(fixed[4..8].try_into().unwrap()),
            ssrc: u32::from_be_bytes(fixed[8..12].try_into().unwrap()),
            dd: (dd_len > 0).then(|| dd.to_vec()),
            payload: payload.to_vec(),
        });
    }
    Ok(out)
}

/// Appends one record to `out` (which should start with [`MAGIC`]).
pub fn write_record(out: &mut Vec<u8>, r: &Record) {
    out.push(u8::from(r.marker));
    out.push(r.pt);
    out.extend_from_slice(&r.seq.to_be_bytes());
    out.extend_from_slice(&r.timestamp.to_be_bytes());
    out.extend_from_slice(&r.ssrc.to_be_bytes());
    let dd = r.dd.as_deref().unwrap_or(&[]);
    out.extend_from_slice(&u16::try_from(dd.len()).unwrap().to_be_bytes());
    out.extend_from_slice(dd);
    out.extend_from_slice(&u16::try_from(r.payload.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&r.payload);
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let recs = vec![
            Record {
                marker: true,
                pt: 98,
                seq: 65535,
                timestamp: 0xdead_beef,
                ssrc: 7,
                dd: Some(vec![0x80, 1, 2]),
                payload: vec![1, 2, 3],
            },
            Record {
                marker: false,
                pt: 45,
                seq: 0,
                timestamp: 1,
                ssrc: 7,
                dd: None,
                payload: vec![],
            },
        ];
        let mut buf = MAGIC.to_vec();
        for r in &recs {
            write_record(&mut buf, r);
        }
        assert_eq!(read(&buf), recs);
        assert!(try_read(&buf[..buf.len() - 1]).is_err());
        assert!(try_read(b"CRTP2\n").is_err());
    }
}
