//! The `application/trickle-ice-sdpfrag` bodies of WHIP/WHEP PATCH (RFC
//! 8840 §9, RFC 9725 §4.3): parsing a client's fragment, checking it, and
//! the two SDP rewrites an ICE restart by fragment needs.
//!
//! Pure text in, text out: no HTTP, no state, no str0m. Owns what a
//! fragment may hold and how large it may be; a fragment that breaks a rule
//! is refused whole with a message that quotes none of it. Must not: decide
//! whether a fragment is an ICE restart for a session (that needs the
//! session's current credentials: the caller compares [`Fragment::ice`]
//! with [`ice_of`] of the offer in force).

/// Most lines a fragment may have (a browser sends one per candidate plus
/// a few; 64 m-lines' worth of candidates stay far below it).
pub const MAX_LINES: usize = 1024;
/// Longest line, bytes.
pub const MAX_LINE: usize = 1024;
/// Most candidates in one fragment.
pub const MAX_CANDIDATES: usize = 256;

/// ICE credentials (RFC 8839 §5.4): a ufrag of 4-256 and a password of
/// 22-256 `ice-char`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceCredentials {
    pub ufrag: String,
    pub pwd: String,
}

/// A client's fragment, checked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Its ICE credentials, when it names them (both or neither).
    pub ice: Option<IceCredentials>,
    /// Its `a=candidate:` lines, whole, as checked.
    pub candidates: Vec<String>,
    /// It says `a=end-of-candidates`.
    pub end_of_candidates: bool,
}

/// Why a fragment was refused: what is wrong, never what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragError(pub String);

impl std::fmt::Display for FragError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(msg: impl Into<String>) -> FragError {
    FragError(msg.into())
}

/// RFC 8839 `ice-char`: ALPHA / DIGIT / "+" / "/".
fn ice_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// Parses and checks a fragment: lines of `type=value` (LF or CRLF), at
/// most [`MAX_LINES`] of at most [`MAX_LINE`] bytes, visible ASCII; at
/// most `max_mlines` `m=` lines; one ufrag and one password (the same
/// wherever they appear), both or neither, well formed; candidates that
/// parse (RFC 8839 §5.1), at most [`MAX_CANDIDATES`]. Attributes it does not
/// know are ignored, as RFC 8840 asks.
pub fn parse(text: &str, max_mlines: usize) -> Result<Fragment, FragError> {
    let mut f = Fragment::default();
    let mut ufrag: Option<&str> = None;
    let mut pwd: Option<&str> = None;
    let mut lines = 0usize;
    let mut mlines = 0usize;
    for raw in text.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        lines += 1;
        if lines > MAX_LINES {
            return Err(bad(format!("the fragment has more than {MAX_LINES} lines")));
        }
        if line.len() > MAX_LINE {
            return Err(bad(format!(
                "a line of the fragment is longer than {MAX_LINE} bytes"
            )));
        }
        if !line.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(bad(
                "the fragment holds control characters or non-ASCII bytes",
            ));
        }
        let Some((kind, value)) = line.split_once('=') else {
            return Err(bad(format!(
                "line {lines} of the fragment is not type=value"
            )));
        };
        match kind {
            "m" => {
                mlines += 1;
                if mlines > max_mlines {
                    return Err(bad(format!(
                        "the fragment has more than {max_mlines} m-lines"
                    )));
                }
            }
            "a" => {
                let (name, arg) = match value.split_once(':') {
                    Some((n, a)) => (n, Some(a)),
                    None => (value, None),
                };
                match (name, arg) {
                    ("ice-ufrag", Some(v)) => same(&mut ufrag, v, "ice-ufrag")?,
                    ("ice-pwd", Some(v)) => same(&mut pwd, v, "ice-pwd")?,
                    ("ice-ufrag" | "ice-pwd", None) => {
                        return Err(bad(format!("a={name} has no value")));
                    }
                    ("candidate", Some(v)) => {
                        check_candidate(v)?;
                        if f.candidates.len() >= MAX_CANDIDATES {
                            return Err(bad(format!(
                                "the fragment has more than {MAX_CANDIDATES} candidates"
                            )));
                        }
                        f.candidates.push(line.to_string());
                    }
                    ("candidate", None) => return Err(bad("a candidate line has no value")),
                    ("end-of-candidates", _) => f.end_of_candidates = true,
                    _ => {}
                }
            }
            k if k.len() == 1 && k.bytes().all(|b| b.is_ascii_lowercase()) => {}
            _ => {
                return Err(bad(format!(
                    "line {lines} of the fragment is not type=value"
                )));
            }
        }
    }
    if lines == 0 {
        return Err(bad("the fragment is empty"));
    }
    f.ice = match (ufrag, pwd) {
        (None, None) => None,
        (Some(u), Some(p)) => {
            if !(4..=256).contains(&u.len()) || !ice_chars(u) {
                return Err(bad(
                    "a=ice-ufrag must be 4-256 characters of A-Z a-z 0-9 + /",
                ));
            }
            if !(22..=256).contains(&p.len()) || !ice_chars(p) {
                return Err(bad(
                    "a=ice-pwd must be 22-256 characters of A-Z a-z 0-9 + /",
                ));
            }
            Some(IceCredentials {
                ufrag: u.to_string(),
                pwd: p.to_string(),
            })
        }
        _ => {
            return Err(bad(
                "the fragment must carry both a=ice-ufrag and a=ice-pwd, or neither",
            ));
        }
    };
    Ok(f)
}

/// Records `v` as the value of `what`, refusing a second, different one.
fn same<'a>(slot: &mut Option<&'a str>, v: &'a str, what: &str) -> Result<(), FragError> {
    match slot {
        Some(seen) if *seen != v => Err(bad(format!(
            "the fragment has two different a={what} values"
        ))),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// An `a=candidate:` value (RFC 8839 §5.1): foundation, component,
/// transport, priority, address, port, `typ` and a type, then name/value
/// pairs.
fn check_candidate(v: &str) -> Result<(), FragError> {
    let malformed = || bad("a candidate line does not parse (RFC 8839 §5.1)");
    let f: Vec<&str> = v.split(' ').collect();
    let [
        foundation,
        component,
        transport,
        priority,
        address,
        port,
        typ,
        kind,
        rest @ ..,
    ] = f.as_slice()
    else {
        return Err(malformed());
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'/'))
    };
    let ok = (1..=32).contains(&foundation.len())
        && ice_chars(foundation)
        && digits(component, 5)
        && token(transport)
        && digits(priority, 10)
        && priority
            .parse::<u64>()
            .is_ok_and(|p| p <= u64::from(u32::MAX))
        && !address.is_empty()
        && address.len() <= 253
        && address
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'%'))
        && port.parse::<u16>().is_ok()
        && *typ == "typ"
        && token(kind)
        && rest.len() % 2 == 0
        && rest
            .iter()
            .all(|t| token(t) || t.parse::<std::net::IpAddr>().is_ok());
    if ok { Ok(()) } else { Err(malformed()) }
}

/// The ICE credentials of an SDP (the first ufrag and password in it).
pub fn ice_of(sdp: &str) -> Option<IceCredentials> {
    let find = |prefix: &str| {
        sdp.lines()
            .find_map(|l| l.trim_end_matches('\r').strip_prefix(prefix))
            .map(str::to_string)
    };
    Some(IceCredentials {
        ufrag: find("a=ice-ufrag:")?,
        pwd: find("a=ice-pwd:")?,
    })
}

/// The offer in force, `previous`, as a client that restarts ICE with
/// `ice` would offer it (RFC 9725 §4.3.3: everything but ICE stays as
/// negotiated): every ufrag and password replaced, the old candidates
/// dropped (an ICE-lite server learns the client's addresses from its
/// checks).
pub fn restart_offer(previous: &str, ice: &IceCredentials) -> String {
    let mut out = String::with_capacity(previous.len());
    for line in previous.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with("a=candidate:") || line == "a=end-of-candidates" {
            continue;
        }
        if line.starts_with("a=ice-ufrag:") {
            out.push_str("a=ice-ufrag:");
            out.push_str(&ice.ufrag);
        } else if line.starts_with("a=ice-pwd:") {
            out.push_str("a=ice-pwd:");
            out.push_str(&ice.pwd);
        } else {
            out.push_str(line);
        }
        out.push_str("\r\n");
    }
    out
}

/// The fragment a 200 to an ICE restart carries (RFC 9725 §4.3.3), from
/// the server's full SDP answer: `a=ice-lite`, the bundle group, then the
/// first m-section's `m=` and `a=mid` lines with the new ufrag, password
/// and candidates, and `a=end-of-candidates`. None if the answer lacks
/// credentials.
pub fn answer_fragment(answer: &str) -> Option<String> {
    let ice = ice_of(answer)?;
    let lines: Vec<&str> = answer.lines().map(|l| l.trim_end_matches('\r')).collect();
    let mut out = String::from("a=ice-lite\r\n");
    if let Some(group) = lines.iter().find(|l| l.starts_with("a=group:BUNDLE")) {
        out.push_str(group);
        out.push_str("\r\n");
    }
    let start = lines.iter().position(|l| l.starts_with("m="))?;
    let end = lines
        .iter()
        .skip(start + 1)
        .position(|l| l.starts_with("m="))
        .map_or(lines.len(), |i| start + 1 + i);
    let section = lines.get(start..end)?;
    if let Some(m) = section.first() {
        out.push_str(m);
        out.push_str("\r\n");
    }
    if let Some(mid) = section.iter().find(|l| l.starts_with("a=mid:")) {
        out.push_str(mid);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
        ice.ufrag, ice.pwd
    ));
    for c in lines.iter().filter(|l| l.starts_with("a=candidate:")) {
        if !out.contains(*c) {
            out.push_str(c);
            out.push_str("\r\n");
        }
    }
    out.push_str("a=end-of-candidates\r\n");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UFRAG: &str = "EsAw";
    const PWD: &str = "P2uYro0UCOQ4zxjKXaWCBui1";

    fn restart() -> String {
        format!(
            "a=ice-options:trickle ice2\r\na=group:BUNDLE 0 1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:{UFRAG}\r\na=ice-pwd:{PWD}\r\na=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0 ufrag {UFRAG} network-id 1\r\na=candidate:3471623853 1 udp 2122194687 198.51.100.2 61765 typ host generation 0 ufrag {UFRAG} network-id 2\r\na=candidate:473322822 1 tcp 1518280447 192.0.2.1 9 typ host tcptype active generation 0 ufrag {UFRAG} network-id 1\r\na=candidate:2154773085 1 udp 1686052607 203.0.113.3 61764 typ srflx raddr 192.0.2.1 rport 61764 generation 0 ufrag {UFRAG} network-id 1\r\na=end-of-candidates\r\n"
        )
    }

    #[test]
    fn an_ice_restart_fragment() {
        let f = parse(&restart(), 64).unwrap();
        assert_eq!(
            f.ice,
            Some(IceCredentials {
                ufrag: UFRAG.into(),
                pwd: PWD.into()
            })
        );
        assert_eq!(f.candidates.len(), 4);
        assert!(f.end_of_candidates);
        // LF endings, session-level credentials, mDNS and IPv6 addresses.
        let lf = format!(
            "a=ice-ufrag:{UFRAG}\na=ice-pwd:{PWD}\na=candidate:1 1 UDP 2130706431 4b6f1c2d-1e2f-4a5b-8c9d-0e1f2a3b4c5d.local 5000 typ host\na=candidate:2 1 udp 1 2001:db8::1 5001 typ relay raddr 2001:db8::2 rport 3478\n"
        );
        let f = parse(&lf, 64).unwrap();
        assert!(f.ice.is_some());
        assert_eq!(f.candidates.len(), 2);
    }

    #[test]
    fn a_trickle_fragment() {
        let f = parse(
            "a=candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host\r\na=end-of-candidates\r\n",
            64,
        )
        .unwrap();
        assert_eq!(f.ice, None);
        assert_eq!(f.candidates.len(), 1);
        // End of candidates alone.
        assert!(parse("a=end-of-candidates", 64).unwrap().end_of_candidates);
        // Unknown attributes and lines are ignored.
        assert!(parse("a=ice-options:trickle\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\nc=IN IP4 0.0.0.0\r\n", 64).is_ok());
    }

    #[test]
    fn hostile_fragments_are_refused() {
        let too_many_lines = "a=end-of-candidates\r\n".repeat(MAX_LINES + 1);
        let long_line = format!("a=x-{}", "y".repeat(MAX_LINE));
        let too_many_candidates =
            "a=candidate:1 1 udp 1 192.0.2.1 5000 typ host\r\n".repeat(MAX_CANDIDATES + 1);
        let mlines = "m=audio 9 UDP/TLS/RTP/SAVPF 0\r\n".repeat(65);
        let long_ufrag = format!("a=ice-ufrag:{}\r\na=ice-pwd:{PWD}\r\n", "u".repeat(257));
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "empty"),
            ("\r\n\r\n\n".into(), "empty"),
            (too_many_lines, "lines"),
            (long_line, "longer"),
            (too_many_candidates, "candidates"),
            (mlines, "m-lines"),
            ("hello world".into(), "type=value"),
            ("ab=cd".into(), "type=value"),
            ("=x".into(), "type=value"),
            ("a=ice-ufrag:abcd\u{0}\r\n".into(), "control"),
            ("a=ice-ufrag:abcd\u{1b}[2J\r\n".into(), "control"),
            ("a=ice-ufrag:abcdé\r\n".into(), "non-ASCII"),
            (format!("a=ice-ufrag:{UFRAG}\r\n"), "both"),
            (format!("a=ice-pwd:{PWD}\r\n"), "both"),
            (
                format!("a=ice-ufrag:abc\r\na=ice-pwd:{PWD}\r\n"),
                "ice-ufrag",
            ),
            (long_ufrag, "ice-ufrag"),
            (
                format!("a=ice-ufrag:{UFRAG}\r\na=ice-pwd:short\r\n"),
                "ice-pwd",
            ),
            (
                format!("a=ice-ufrag:ab\"cd\r\na=ice-pwd:{PWD}\r\n"),
                "ice-ufrag",
            ),
            (
                format!("a=ice-ufrag:{UFRAG}\r\na=ice-ufrag:Other\r\na=ice-pwd:{PWD}\r\n"),
                "two different",
            ),
            (format!("a=ice-ufrag\r\na=ice-pwd:{PWD}\r\n"), "no value"),
            ("a=candidate\r\n".into(), "no value"),
            ("a=candidate:garbage\r\n".into(), "candidate"),
            (
                "a=candidate:1 1 udp 1 192.0.2.1 70000 typ host\r\n".into(),
                "candidate",
            ),
            (
                "a=candidate:1 1 udp 99999999999 192.0.2.1 5000 typ host\r\n".into(),
                "candidate",
            ),
            (
                "a=candidate:1 1 udp 1 192.0.2.1 5000 type host\r\n".into(),
                "candidate",
            ),
            (
                "a=candidate:1 1 udp 1 192.0.2.1 5000 typ host raddr\r\n".into(),
                "candidate",
            ),
            (
                "a=candidate:1 1 udp 1 <script> 5000 typ host\r\n".into(),
                "candidate",
            ),
            (
                "a=candidate:1  1 udp 1 192.0.2.1 5000 typ host\r\n".into(),
                "candidate",
            ),
            (
                format!(
                    "a=candidate:{} 1 udp 1 192.0.2.1 5000 typ host\r\n",
                    "f".repeat(33)
                ),
                "candidate",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text, 64)
                .expect_err(&format!("{:?} was accepted", &text[..text.len().min(60)]));
            assert!(
                e.0.contains(want),
                "{:?}: {e} (wanted {want:?})",
                &text[..text.len().min(60)]
            );
            // The message quotes nothing of the fragment.
            assert!(!e.0.contains("script") && !e.0.contains("garbage") && !e.0.contains('\u{1b}'));
        }
    }

    #[test]
    fn a_restart_rewrites_the_offer_in_force() {
        let previous = "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:old1\r\na=ice-pwd:oldoldoldoldoldoldoldold\r\na=candidate:1 1 udp 1 192.0.2.1 5000 typ host\r\na=end-of-candidates\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\na=ice-ufrag:old1\r\na=ice-pwd:oldoldoldoldoldoldoldold\r\n";
        let ice = IceCredentials {
            ufrag: UFRAG.into(),
            pwd: PWD.into(),
        };
        let offer = restart_offer(previous, &ice);
        assert!(!offer.contains("old"), "{offer}");
        assert!(!offer.contains("a=candidate") && !offer.contains("end-of-candidates"));
        assert_eq!(
            offer.matches(&format!("a=ice-ufrag:{UFRAG}\r\n")).count(),
            2
        );
        assert_eq!(offer.matches(&format!("a=ice-pwd:{PWD}\r\n")).count(), 2);
        assert!(
            offer.starts_with("v=0\r\n")
                && offer.contains("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\n")
        );
        assert_eq!(ice_of(&offer), Some(ice));
    }

    #[test]
    fn the_answer_fragment() {
        let answer = "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=ice-lite\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=ice-ufrag:NewUfragNewUfrag\r\na=ice-pwd:NewPasswordNewPassword12\r\na=candidate:1 1 udp 2130706175 127.0.0.1 5000 typ host\r\na=candidate:2 1 tcp 1 127.0.0.1 5000 typ host tcptype passive\r\na=end-of-candidates\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\na=ice-ufrag:NewUfragNewUfrag\r\na=ice-pwd:NewPasswordNewPassword12\r\na=candidate:1 1 udp 2130706175 127.0.0.1 5000 typ host\r\na=end-of-candidates\r\n";
        let frag = answer_fragment(answer).unwrap();
        assert_eq!(
            frag,
            "a=ice-lite\r\na=group:BUNDLE 0 1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:NewUfragNewUfrag\r\na=ice-pwd:NewPasswordNewPassword12\r\na=candidate:1 1 udp 2130706175 127.0.0.1 5000 typ host\r\na=candidate:2 1 tcp 1 127.0.0.1 5000 typ host tcptype passive\r\na=end-of-candidates\r\n"
        );
        // It parses as a fragment itself.
        let f = parse(&frag, 64).unwrap();
        assert_eq!(f.ice.unwrap().ufrag, "NewUfragNewUfrag");
        assert_eq!(f.candidates.len(), 2);
        assert_eq!(answer_fragment("v=0\r\nm=audio 9 x 0\r\n"), None);
    }
}
