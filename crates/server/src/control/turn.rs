//! TURN credentials for coturn's `use-auth-secret` scheme (the "TURN REST
//! API", draft-uberti-behave-turn-rest): corelay and coturn share a secret;
//! corelay mints, per participant, a username `EXPIRY:IDENTITY` (EXPIRY in
//! seconds since the Unix epoch) and the password
//! `base64(HMAC-SHA1(secret, username))`. coturn recomputes the password
//! from the username and refuses it after EXPIRY; it keeps no user list.
//!
//! Owns the `--turn-*` flags' checks, the minting, and the two shapes the
//! servers are handed out in: the `Link: rel="ice-server"` header of WHIP and
//! WHEP (RFC 9725 §4.6) and the `iceServers` JSON of `GET
//! /api/v1/ice-servers` (what `RTCPeerConnection` takes). Must not: decide
//! who may have credentials ([`super::http`] and [`super::auth`] do), or
//! ever put the secret in a log, an error or a `Debug` string.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use base64::Engine as _;

/// Longest `--turn-url`, bytes.
const MAX_URL_LEN: usize = 512;
/// Most `--turn-url`s.
const MAX_URLS: usize = 16;
/// Longest identity put in a username, bytes before escaping.
const MAX_IDENTITY: usize = 256;

/// The TURN servers and how to mint their credentials (`--turn-url`,
/// `--turn-secret-file`, `--turn-ttl`). Without URLs it hands out nothing.
pub struct IceServers {
    urls: Vec<String>,
    secret: Vec<u8>,
    ttl: Duration,
}

impl std::fmt::Debug for IceServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IceServers")
            .field("urls", &self.urls)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Default for IceServers {
    fn default() -> Self {
        IceServers {
            urls: Vec::new(),
            secret: Vec::new(),
            ttl: Duration::from_secs(3600),
        }
    }
}

/// Credentials minted for one participant, valid for every URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minted {
    pub urls: Vec<String>,
    pub username: String,
    pub credential: String,
}

impl IceServers {
    /// Checks the flags: every URL a `turn:`/`turns:` URI (RFC 7065), a
    /// secret with them (read from `secret_file`, one trailing newline
    /// trimmed) and none without, a positive ttl. The errors name the flag
    /// and never the secret.
    pub fn new(
        urls: &[String],
        secret_file: Option<&std::path::Path>,
        ttl: Duration,
    ) -> Result<IceServers, String> {
        if urls.is_empty() {
            if secret_file.is_some() {
                return Err("--turn-secret-file needs at least one --turn-url".into());
            }
            return Ok(IceServers::default());
        }
        if urls.len() > MAX_URLS {
            return Err(format!("at most {MAX_URLS} --turn-url"));
        }
        for u in urls {
            check_url(u).map_err(|why| format!("--turn-url {u:?}: {why}"))?;
        }
        let Some(path) = secret_file else {
            return Err("--turn-url needs --turn-secret-file (coturn's static-auth-secret)".into());
        };
        let mut secret = std::fs::read(path)
            .map_err(|e| format!("--turn-secret-file {}: {e}", path.display()))?;
        if secret.last() == Some(&b'\n') {
            secret.pop();
            if secret.last() == Some(&b'\r') {
                secret.pop();
            }
        }
        if secret.is_empty() {
            return Err(format!(
                "--turn-secret-file {}: the file is empty",
                path.display()
            ));
        }
        if ttl.is_zero() {
            return Err("--turn-ttl must be positive".into());
        }
        Ok(IceServers {
            urls: urls.to_vec(),
            secret,
            ttl,
        })
    }

    /// Are there servers to hand out?
    pub fn enabled(&self) -> bool {
        !self.urls.is_empty()
    }

    /// Credentials for `identity`, valid for the ttl from now; None without
    /// servers.
    pub fn mint(&self, identity: &str) -> Option<Minted> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.mint_at(identity, now)
    }

    /// [`IceServers::mint`] at `now` (seconds since the Unix epoch).
    pub fn mint_at(&self, identity: &str, now: u64) -> Option<Minted> {
        if !self.enabled() {
            return None;
        }
        let expiry = now.saturating_add(self.ttl.as_secs());
        let username = format!("{expiry}:{}", escape_identity(identity));
        let credential = credential(&self.secret, &username);
        Some(Minted {
            urls: self.urls.clone(),
            username,
            credential,
        })
    }
}

/// coturn's password for `username`: base64 of HMAC-SHA1 keyed with the
/// shared secret.
pub fn credential(secret: &[u8], username: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret);
    let tag = hmac::sign(&key, username.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// An identity as it goes in a username: bounded, and percent-escaped
/// outside `A-Z a-z 0-9 - . _ ~ @`, so that it is header-safe ASCII without
/// quotes, backslashes or colons whatever a token's `sub` holds. coturn
/// does not read it (only the expiry before the first colon); its logs do.
fn escape_identity(identity: &str) -> String {
    let mut end = identity.len().min(MAX_IDENTITY);
    while !identity.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end);
    for b in identity.bytes().take(end) {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'@') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push_str("guest");
    }
    out
}

/// A `turn:`/`turns:` URI as RFC 7065 writes it: `turn:HOST[:PORT][?transport=udp|tcp]`.
fn check_url(u: &str) -> Result<(), &'static str> {
    if u.len() > MAX_URL_LEN {
        return Err("too long");
    }
    let rest = u
        .strip_prefix("turn:")
        .or_else(|| u.strip_prefix("turns:"))
        .ok_or("must start with turn: or turns:")?;
    let (hostport, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    if let Some(q) = query
        && q != "transport=udp"
        && q != "transport=tcp"
    {
        return Err("the only query allowed is ?transport=udp or ?transport=tcp");
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or("an IPv6 host needs its ']'")?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("not an IPv6 address between [ ]");
        }
        (addr, after.strip_prefix(':'))
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'))
    {
        return Err("the host must be a name or an IP address");
    }
    if let Some(p) = port
        && !p.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err("the port must be 1-65535");
    }
    Ok(())
}

/// One `Link` header value per URL (RFC 9725 §4.6, RFC 8288):
/// `<turn:…>; rel="ice-server"; username="…"; credential="…"; credential-type="password"`.
/// The URLs were checked at start and the username escaped, the credential
/// is base64: none holds a quote or a backslash.
pub fn link_headers(m: &Minted) -> Vec<String> {
    m.urls
        .iter()
        .map(|u| {
            format!(
                "<{u}>; rel=\"ice-server\"; username=\"{}\"; credential=\"{}\"; credential-type=\"password\"",
                m.username, m.credential
            )
        })
        .collect()
}

/// The `iceServers` document: `{"iceServers":[{urls,username,credential}]}`,
/// an empty list without servers.
pub fn json(m: Option<&Minted>) -> serde_json::Value {
    let servers: Vec<serde_json::Value> = m
        .map(|m| {
            serde_json::json!({
                "urls": m.urls,
                "username": m.username,
                "credential": m.credential,
            })
        })
        .into_iter()
        .collect();
    serde_json::json!({ "iceServers": servers })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(urls: &[&str], secret: &str) -> IceServers {
        IceServers {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            secret: secret.as_bytes().to_vec(),
            ttl: Duration::from_secs(3600),
        }
    }

    #[test]
    fn hmac_sha1_matches_rfc_2202() {
        // RFC 2202 test case 1: key 0x0b x 20, "Hi There".
        let key = [0x0bu8; 20];
        let want = [
            0xb6, 0x17, 0x31, 0x86, 0x55, 0x05, 0x72, 0x64, 0xe2, 0x8b, 0xc0, 0xb6, 0xfb, 0x37,
            0x8c, 0x8e, 0xf1, 0x46, 0xbe, 0x00,
        ];
        let want = base64::engine::general_purpose::STANDARD.encode(want);
        assert_eq!(credential(&key, "Hi There"), want);
    }

    #[test]
    fn minted_credentials_are_coturns() {
        // The passwords below were computed independently:
        // printf '%s' USERNAME | openssl dgst -sha1 -hmac SECRET -binary | base64
        let s = servers(&["turn:turn.example.net:3478?transport=udp"], "north");
        let m = s.mint_at("alice", 1_700_000_000).unwrap();
        assert_eq!(m.username, "1700003600:alice");
        assert_eq!(m.urls, ["turn:turn.example.net:3478?transport=udp"]);
        let mut s = servers(&["turn:h"], "coturn-shared-secret");
        s.ttl = Duration::ZERO;
        assert_eq!(
            s.mint_at("alice", 1_700_000_000).unwrap().credential,
            "eaPAufPBtzKyTlFFj8/AobPZBvg="
        );
        let s = servers(&["turn:h"], "north");
        assert_eq!(
            s.mint_at("p-7", 1_700_000_000).unwrap().credential,
            "Lu2modokXrAmlW43F+fjY/irX2A="
        );
        // No servers, nothing minted.
        assert_eq!(IceServers::default().mint_at("alice", 1), None);
    }

    #[test]
    fn identities_are_escaped_and_bounded() {
        let s = servers(&["turn:h"], "k");
        let m = s.mint_at("a\"b\\c:d e\u{e9}", 10).unwrap();
        assert_eq!(m.username, "3610:a%22b%5Cc%3Ad%20e%C3%A9");
        assert_eq!(s.mint_at("", 10).unwrap().username, "3610:guest");
        let long = "x".repeat(10_000);
        assert_eq!(
            s.mint_at(&long, 10).unwrap().username.len(),
            "3610:".len() + MAX_IDENTITY
        );
        // A multi-byte character at the bound is not split.
        let edge = format!("{}\u{e9}", "x".repeat(MAX_IDENTITY - 1));
        assert!(s.mint_at(&edge, 10).unwrap().username.ends_with('x'));
    }

    #[test]
    fn link_header_syntax() {
        let s = servers(
            &[
                "turn:turn.example.net:3478?transport=udp",
                "turns:turn.example.net:443?transport=tcp",
            ],
            "k",
        );
        let m = s.mint_at("alice", 0).unwrap();
        let links = link_headers(&m);
        assert_eq!(links.len(), 2);
        assert_eq!(
            links[0],
            format!(
                "<turn:turn.example.net:3478?transport=udp>; rel=\"ice-server\"; username=\"3600:alice\"; credential=\"{}\"; credential-type=\"password\"",
                m.credential
            )
        );
        for l in &links {
            // A valid header value, one link (no comma), parameters that
            // parse as RFC 8288 link-params.
            assert!(axum::http::HeaderValue::from_str(l).is_ok());
            assert!(!l.contains(','));
            let (target, params) = l.split_once(">;").unwrap();
            assert!(target.starts_with("<turn"));
            let params: Vec<(&str, &str)> = params
                .split(';')
                .map(|p| p.trim().split_once('=').unwrap())
                .collect();
            assert_eq!(
                params.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
                ["rel", "username", "credential", "credential-type"]
            );
            assert!(
                params
                    .iter()
                    .all(|(_, v)| v.len() >= 2 && v.starts_with('"') && v.ends_with('"'))
            );
        }
    }

    #[test]
    fn ice_servers_json() {
        assert_eq!(
            json(None),
            serde_json::json!({"iceServers": []}),
            "without --turn-url"
        );
        let s = servers(&["turn:h:3478"], "k");
        let m = s.mint_at("bob", 0).unwrap();
        let j = json(Some(&m));
        assert_eq!(
            j["iceServers"][0]["urls"],
            serde_json::json!(["turn:h:3478"])
        );
        assert_eq!(j["iceServers"][0]["username"], "3600:bob");
        assert_eq!(j["iceServers"][0]["credential"], m.credential.as_str());
    }

    #[test]
    fn flags_are_checked() {
        let dir = std::env::temp_dir().join(format!("corelay-turn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let hour = Duration::from_secs(3600);
        let urls = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        let ok = IceServers::new(
            &urls(&[
                "turn:10.0.0.1:3478?transport=udp",
                "turn:turn.example.net?transport=tcp",
                "turns:[::1]:443?transport=tcp",
            ]),
            Some(&secret),
            hour,
        )
        .unwrap();
        assert!(ok.enabled());
        assert_eq!(ok.secret, b"s3cret");
        // The secret never shows in Debug.
        assert!(!format!("{ok:?}").contains("s3cret"));
        assert!(!IceServers::new(&[], None, hour).unwrap().enabled());

        for bad in [
            "stun:h:3478",
            "turn:",
            "turn:h:0",
            "turn:h:99999",
            "turn:h?transport=sctp",
            "turn:h\"x",
            "turn:h x",
            "turn:h,turn:i",
            "turn:[zz]:1",
            "turn:h>; rel=x",
        ] {
            let e = IceServers::new(&urls(&[bad]), Some(&secret), hour).unwrap_err();
            assert!(e.starts_with("--turn-url"), "{bad}: {e}");
        }
        let e = IceServers::new(&urls(&["turn:h"]), None, hour).unwrap_err();
        assert!(e.contains("--turn-secret-file"), "{e}");
        let e = IceServers::new(&[], Some(&secret), hour).unwrap_err();
        assert!(e.contains("--turn-url"), "{e}");
        let e = IceServers::new(&urls(&["turn:h"]), Some(&empty), hour).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = IceServers::new(&urls(&["turn:h"]), Some(&dir.join("nope")), hour).unwrap_err();
        assert!(e.contains("--turn-secret-file"), "{e}");
        let e = IceServers::new(&urls(&["turn:h"]), Some(&secret), Duration::ZERO).unwrap_err();
        assert!(e.contains("--turn-ttl"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
