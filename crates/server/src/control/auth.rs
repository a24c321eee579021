//! Authentication and authorization (the LiveKit model) and the CORS policy.
//!
//! With `--auth-secret`, every call that creates or changes a participant
//! carries `Authorization: Bearer <jwt>`: a JWT signed with HS256 and that
//! secret, whose claims say who the bearer is (`sub`), which room it may join
//! (`room`) and what it may do there (`publish`, `subscribe`, `admin`).
//! Whoever holds the secret mints tokens (`corelay token`, or any JWT library);
//! the server keeps no user list. Without a secret everything is open.
//!
//! 401 means "no valid token" (missing, malformed, bad signature, expired);
//! 403 means "a valid token that does not grant this". Messages never echo the
//! token or the verifier's internals.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, header};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::ApiError;
use crate::config::{Config, TokenArgs};
use axum::http::StatusCode;

/// Clock skew tolerated on `exp` and `nbf`, seconds.
pub const LEEWAY_SECS: u64 = 30;
/// Longest identity (`sub`) accepted, bytes.
pub const MAX_IDENTITY_LEN: usize = 256;

fn yes() -> bool {
    true
}

/// The claims of an access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The participant's identity (required). PATCH and DELETE of a
    /// participant need a token with the same `sub` and `room` (or `admin`).
    pub sub: String,
    /// The room the token grants (required unless `admin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// Display name shown to the room (default: `?name=`, else a guest name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// May publish tracks (default true).
    #[serde(default = "yes")]
    pub publish: bool,
    /// May receive tracks (default true).
    #[serde(default = "yes")]
    pub subscribe: bool,
    /// May send application messages on the data channel (default true;
    /// `can_publish_data` is read as the same grant).
    #[serde(default = "yes", alias = "can_publish_data")]
    pub publish_data: bool,
    /// Server administrator: any room, any participant, the listings and stats.
    #[serde(default)]
    pub admin: bool,
    /// Expiry, seconds since the Unix epoch (required).
    pub exp: u64,
    /// Not before, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Issued at, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Claims {
    /// A token for `identity` in `room` (None: admin-only tokens), valid for
    /// `ttl` from now, with publish and subscribe rights.
    pub fn new(identity: impl Into<String>, room: Option<String>, ttl: Duration) -> Claims {
        let now = now_secs();
        Claims {
            sub: identity.into(),
            room,
            name: None,
            publish: true,
            subscribe: true,
            publish_data: true,
            admin: false,
            exp: now.saturating_add(ttl.as_secs()),
            nbf: None,
            iat: Some(now),
        }
    }

    /// Does this token grant `room`?
    pub fn grants_room(&self, room: &str) -> bool {
        self.admin || self.room.as_deref() == Some(room)
    }

    /// 403 unless the token grants `room`.
    pub fn may_join(&self, room: &str) -> Result<(), ApiError> {
        if self.grants_room(room) {
            Ok(())
        } else {
            Err(forbidden("the token does not grant this room"))
        }
    }

    /// 403 unless the token carries the rights `needs` asks for.
    pub fn may(&self, needs: Needs) -> Result<(), ApiError> {
        if needs.publish && !self.publish {
            return Err(forbidden("the token does not allow publishing"));
        }
        if needs.subscribe && !self.subscribe {
            return Err(forbidden("the token does not allow subscribing"));
        }
        Ok(())
    }

    /// 403 unless the token is the participant's own (same identity and
    /// room) or an admin token.
    pub fn may_manage(&self, room: &str, identity: &str) -> Result<(), ApiError> {
        if self.admin || (self.sub == identity && self.room.as_deref() == Some(room)) {
            Ok(())
        } else {
            Err(forbidden(
                "only the participant's own token or an admin token may change it",
            ))
        }
    }

    /// 403 unless this is an admin token.
    pub fn must_be_admin(&self) -> Result<(), ApiError> {
        if self.admin {
            Ok(())
        } else {
            Err(forbidden("this needs an admin token"))
        }
    }
}

/// The rights a request needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub publish: bool,
    pub subscribe: bool,
}

impl Needs {
    pub const PUBLISH: Needs = Needs {
        publish: true,
        subscribe: false,
    };
    pub const SUBSCRIBE: Needs = Needs {
        publish: false,
        subscribe: true,
    };

    pub fn and(self, other: Needs) -> Needs {
        Needs {
            publish: self.publish || other.publish,
            subscribe: self.subscribe || other.subscribe,
        }
    }
}

/// What an SDP offer asks for: `publish` if an audio/video m-line is
/// `sendonly` or `sendrecv`, `subscribe` if one is `recvonly` or `sendrecv`.
/// A line scan, not a parse: the offer is parsed properly later; a section
/// without a direction is `sendrecv` (or the session-level direction).
pub fn sdp_needs(sdp: &str) -> Needs {
    #[derive(Clone, Copy, PartialEq)]
    enum Dir {
        SendRecv,
        SendOnly,
        RecvOnly,
        Inactive,
    }
    fn dir_of(line: &str) -> Option<Dir> {
        match line {
            "a=sendrecv" => Some(Dir::SendRecv),
            "a=sendonly" => Some(Dir::SendOnly),
            "a=recvonly" => Some(Dir::RecvOnly),
            "a=inactive" => Some(Dir::Inactive),
            _ => None,
        }
    }
    let mut needs = Needs::default();
    let mut session_dir = Dir::SendRecv;
    // The current m-section: (is audio/video, its direction).
    let mut section: Option<(bool, Dir)> = None;
    let close = |section: Option<(bool, Dir)>, needs: &mut Needs| {
        if let Some((true, dir)) = section {
            needs.publish |= matches!(dir, Dir::SendRecv | Dir::SendOnly);
            needs.subscribe |= matches!(dir, Dir::SendRecv | Dir::RecvOnly);
        }
    };
    for line in sdp.lines() {
        let line = line.trim();
        if let Some(m) = line.strip_prefix("m=") {
            close(section, &mut needs);
            let media = m.split_whitespace().next().unwrap_or("");
            let av = media.eq_ignore_ascii_case("audio") || media.eq_ignore_ascii_case("video");
            section = Some((av, session_dir));
        } else if let Some(d) = dir_of(line) {
            match &mut section {
                Some((_, dir)) => *dir = d,
                None => session_dir = d,
            }
        }
    }
    close(section, &mut needs);
    needs
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

fn forbidden(message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

/// Who may call the API, and from which web origins.
pub struct Access {
    key: Option<DecodingKey>,
    validation: Validation,
    /// Allowed `Origin`s, lowercase, without a trailing slash.
    cors_origins: Vec<String>,
    /// `--cors-origin '*'`: any origin.
    cors_any: bool,
}

impl Default for Access {
    fn default() -> Self {
        Access::new(None, Vec::new())
    }
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("auth", &self.enabled())
            .field("cors_origins", &self.cors_origins)
            .field("cors_any", &self.cors_any)
            .finish()
    }
}

impl Access {
    /// `secret`: the HS256 key (None or empty: no authentication).
    /// `cors_origins`: origins allowed to call the API from a browser
    /// (`*` for any; entries may hold comma-separated lists).
    pub fn new(secret: Option<Vec<u8>>, cors_origins: Vec<String>) -> Access {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let mut origins = Vec::new();
        let mut any = false;
        for o in cors_origins.iter().flat_map(|o| o.split(',')) {
            let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
            if o == "*" {
                any = true;
            } else if !o.is_empty() && !origins.contains(&o) {
                origins.push(o);
            }
        }
        Access {
            key: secret
                .filter(|s| !s.is_empty())
                .map(|s| DecodingKey::from_secret(&s)),
            validation,
            cors_origins: origins,
            cors_any: any,
        }
    }

    /// From the server's flags (reads `--auth-secret-file`).
    pub fn from_config(cfg: &Config) -> Result<Access, String> {
        Ok(Access::new(cfg.auth_secret()?, cfg.cors_origins.clone()))
    }

    /// Is authentication on?
    pub fn enabled(&self) -> bool {
        self.key.is_some()
    }

    /// The bearer's claims: `Ok(None)` when authentication is off, 401 when
    /// it is on and the request has no valid token.
    pub fn verify(&self, headers: &HeaderMap) -> Result<Option<Claims>, ApiError> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let token = bearer(headers)?;
        let data = jsonwebtoken::decode::<Claims>(token, key, &self.validation)
            .map_err(|e| unauthorized(reason(e.kind())))?;
        let c = data.claims;
        if c.sub.trim().is_empty() || c.sub.len() > MAX_IDENTITY_LEN {
            return Err(unauthorized(
                "the token's sub (identity) is empty or too long",
            ));
        }
        if c.room.is_none() && !c.admin {
            return Err(unauthorized("the token names no room"));
        }
        Ok(Some(c))
    }

    /// What `Access-Control-Allow-Origin` to answer a request from `origin`
    /// with, if it may have one.
    pub fn cors_allow(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        if self.cors_any {
            return Some(HeaderValue::from_static("*"));
        }
        let o = origin.to_str().ok()?;
        let norm = o.trim_end_matches('/').to_ascii_lowercase();
        self.cors_origins.contains(&norm).then(|| origin.clone())
    }
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized(
            "this needs an access token: Authorization: Bearer <token>",
        ));
    };
    let v = v
        .to_str()
        .map_err(|_| unauthorized("the Authorization header is not ASCII"))?
        .trim();
    let (scheme, token) = v.split_once(' ').unwrap_or((v, ""));
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(unauthorized(
            "the Authorization header must be \"Bearer <token>\"",
        ));
    }
    Ok(token)
}

/// Why a token was refused, in words that reveal nothing of it.
fn reason(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
        ErrorKind::InvalidSignature => "the token's signature is invalid",
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            "the token must be signed with HS256"
        }
        ErrorKind::MissingRequiredClaim(_)
        | ErrorKind::InvalidClaimFormat(_)
        | ErrorKind::Json(_) => "the token's claims are missing or invalid (sub, room, exp)",
        _ => "the token is malformed",
    }
}

/// Signs `claims` with `secret` (HS256).
pub fn mint(secret: &[u8], claims: &Claims) -> Result<String, String> {
    if secret.is_empty() {
        return Err("the secret is empty".into());
    }
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(|e| format!("cannot sign the token: {e}"))
}

/// `corelay token`: the token its flags describe.
pub fn token_command(a: &TokenArgs) -> Result<String, String> {
    let room = a.room.clone().filter(|r| !r.is_empty());
    if room.is_none() && !a.admin {
        return Err("--room is required (or --admin)".into());
    }
    if a.identity.is_empty() || a.identity.len() > MAX_IDENTITY_LEN {
        return Err(format!("--identity must be 1-{MAX_IDENTITY_LEN} bytes"));
    }
    let mut c = Claims::new(a.identity.clone(), room, a.ttl);
    c.name = a.name.clone();
    c.admin = a.admin;
    c.publish = !a.no_publish;
    c.subscribe = !a.no_subscribe;
    c.publish_data = !a.no_publish_data;
    mint(a.secret.expose().as_bytes(), &c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test-secret-0123456789abcdef0123";

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        h
    }

    fn access() -> Access {
        Access::new(Some(SECRET.to_vec()), vec![])
    }

    fn token(c: &Claims) -> String {
        mint(SECRET, c).unwrap()
    }

    fn alice() -> Claims {
        Claims::new("alice", Some("r1".into()), Duration::from_secs(600))
    }

    #[test]
    fn open_without_a_secret() {
        let a = Access::new(None, vec![]);
        assert!(!a.enabled());
        assert_eq!(a.verify(&HeaderMap::new()), Ok(None));
        // An empty secret is no secret.
        assert!(!Access::new(Some(Vec::new()), vec![]).enabled());
    }

    #[test]
    fn a_valid_token_verifies() {
        let c = alice();
        let got = access().verify(&headers(&token(&c))).unwrap().unwrap();
        assert_eq!(got, c);
        assert!(got.publish && got.subscribe && !got.admin);
        // The scheme is case-insensitive.
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("bearer {}", token(&c))).unwrap(),
        );
        assert!(access().verify(&h).unwrap().is_some());
    }

    #[test]
    fn defaults_of_omitted_claims() {
        // A token minted elsewhere, with only sub/room/exp.
        let exp = now_secs() + 60;
        let raw = serde_json::json!({"sub": "bob", "room": "r1", "exp": exp});
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &raw,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        let c = access().verify(&headers(&t)).unwrap().unwrap();
        assert!(c.publish && c.subscribe && !c.admin);
        assert_eq!(c.name, None);
    }

    fn err(a: &Access, h: &HeaderMap) -> ApiError {
        a.verify(h).unwrap_err()
    }

    #[test]
    fn missing_malformed_and_forged_tokens_are_401() {
        let a = access();
        let e = err(&a, &HeaderMap::new());
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcg=="),
        );
        assert_eq!(err(&a, &h).status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            err(&a, &headers("not.a.jwt")).status,
            StatusCode::UNAUTHORIZED
        );
        let forged = mint(b"another-secret", &alice()).unwrap();
        let e = err(&a, &headers(&forged));
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(e.message.contains("signature"), "{e:?}");
        // The message never echoes the token.
        assert!(!e.message.contains(&forged[..20]));
    }

    #[test]
    fn expired_and_immature_tokens_are_401() {
        let a = access();
        let mut c = alice();
        c.exp = now_secs() - 3600;
        let e = err(&a, &headers(&token(&c)));
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(e.message.contains("expired"), "{e:?}");
        // Within the leeway: still fine.
        c.exp = now_secs() - LEEWAY_SECS / 2;
        assert!(a.verify(&headers(&token(&c))).is_ok());
        let mut c = alice();
        c.nbf = Some(now_secs() + 3600);
        assert!(
            err(&a, &headers(&token(&c)))
                .message
                .contains("not valid yet")
        );
    }

    #[test]
    fn other_algorithms_are_refused() {
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS384),
            &alice(),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        let e = err(&access(), &headers(&t));
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(e.message.contains("HS256"), "{e:?}");
        // alg "none": header {"alg":"none"} with an empty signature.
        let t = format!(
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
            token(&alice()).split('.').nth(1).unwrap()
        );
        assert_eq!(
            err(&access(), &headers(&t)).status,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn room_and_identity_are_required() {
        let a = access();
        let mut c = alice();
        c.room = None;
        assert_eq!(
            err(&a, &headers(&token(&c))).status,
            StatusCode::UNAUTHORIZED
        );
        // Admin tokens need no room.
        c.admin = true;
        assert!(a.verify(&headers(&token(&c))).unwrap().unwrap().admin);
        let mut c = alice();
        c.sub = String::new();
        assert_eq!(
            err(&a, &headers(&token(&c))).status,
            StatusCode::UNAUTHORIZED
        );
        c.sub = "x".repeat(MAX_IDENTITY_LEN + 1);
        assert_eq!(
            err(&a, &headers(&token(&c))).status,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn grants() {
        let c = alice();
        assert!(c.may_join("r1").is_ok());
        let e = c.may_join("r2").unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::FORBIDDEN, "forbidden"));
        assert!(c.may(Needs::PUBLISH.and(Needs::SUBSCRIBE)).is_ok());
        let mut viewer = alice();
        viewer.publish = false;
        assert_eq!(
            viewer.may(Needs::PUBLISH).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert!(viewer.may(Needs::SUBSCRIBE).is_ok());
        let mut publisher = alice();
        publisher.subscribe = false;
        assert_eq!(
            publisher.may(Needs::SUBSCRIBE).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        // Ownership: same identity and room, or admin.
        assert!(c.may_manage("r1", "alice").is_ok());
        assert_eq!(
            c.may_manage("r1", "bob").unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            c.may_manage("r2", "alice").unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(c.must_be_admin().unwrap_err().status, StatusCode::FORBIDDEN);
        let mut admin = Claims::new("ops", None, Duration::from_secs(60));
        admin.admin = true;
        assert!(admin.may_join("any").is_ok());
        assert!(admin.may_manage("r9", "bob").is_ok());
        assert!(admin.must_be_admin().is_ok());
    }

    #[test]
    fn sdp_directions() {
        let offer = |lines: &[&str]| format!("v=0\r\n{}\r\n", lines.join("\r\n"));
        let n = |p, s| Needs {
            publish: p,
            subscribe: s,
        };
        let pubsub = offer(&[
            "m=video 9 UDP/TLS/RTP/SAVPF 96",
            "a=sendonly",
            "m=audio 9 UDP/TLS/RTP/SAVPF 111",
            "a=recvonly",
            "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
        ]);
        assert_eq!(sdp_needs(&pubsub), n(true, true));
        let viewer = offer(&[
            "m=video 9 X 96",
            "a=recvonly",
            "m=audio 9 X 111",
            "a=recvonly",
        ]);
        assert_eq!(sdp_needs(&viewer), n(false, true));
        let publisher = offer(&["m=video 9 X 96", "a=sendonly"]);
        assert_eq!(sdp_needs(&publisher), n(true, false));
        // No direction: sendrecv.
        assert_eq!(sdp_needs(&offer(&["m=audio 9 X 111"])), n(true, true));
        // A session-level direction applies to sections without their own.
        let s = offer(&[
            "a=recvonly",
            "m=video 9 X 96",
            "m=audio 9 X 111",
            "a=inactive",
        ]);
        assert_eq!(sdp_needs(&s), n(false, true));
        // Data channel only, inactive lines, garbage: nothing.
        let dc = offer(&[
            "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
            "a=sendrecv",
        ]);
        assert_eq!(sdp_needs(&dc), n(false, false));
        assert_eq!(
            sdp_needs(&offer(&["m=video 9 X 96", "a=inactive"])),
            n(false, false)
        );
        assert_eq!(sdp_needs("garbage"), n(false, false));
    }

    #[test]
    fn cors_origins() {
        let a = Access::new(
            None,
            vec![
                "https://app.example/".into(),
                "http://a.test, http://b.test".into(),
            ],
        );
        let allow = |o: &'static str| a.cors_allow(&HeaderValue::from_static(o));
        assert_eq!(allow("https://app.example").unwrap(), "https://app.example");
        assert!(allow("http://a.test").is_some());
        assert!(allow("http://b.test").is_some());
        assert!(allow("https://evil.example").is_none());
        assert!(allow("https://app.example.evil").is_none());
        assert!(
            Access::default()
                .cors_allow(&HeaderValue::from_static("http://x"))
                .is_none()
        );
        let any = Access::new(None, vec!["*".into()]);
        assert_eq!(
            any.cors_allow(&HeaderValue::from_static("http://x"))
                .unwrap(),
            "*"
        );
    }
}
