//! HTTP signaling: corelay's native participant API (docs/api.md).
//!
//! This is the only module that knows the HTTP dialect. Another dialect
//! (WHIP/WHEP, another SFU's API) is another pair of functions with the same
//! shape: offer in, answer + resource location out; delete the resource.

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ureq::Agent;

/// Why joining or leaving failed.
#[derive(Debug, Clone)]
pub struct JoinError {
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// The response body (the JSON error), or a description of the failure.
    pub body: String,
    /// `Retry-After` in seconds, when the server sent one (503 from admission control).
    pub retry_after: Option<u64>,
}

impl JoinError {
    /// An error that did not come from an HTTP answer.
    pub fn local(msg: impl Into<String>) -> Self {
        JoinError {
            status: None,
            body: msg.into(),
            retry_after: None,
        }
    }

    /// The stable error `code` from the server's JSON body, if any.
    pub fn code(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        v.get("code")?.as_str().map(str::to_string)
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "HTTP {s}: {}", self.body),
            None => write!(f, "{}", self.body),
        }
    }
}

impl std::error::Error for JoinError {}

/// A successful POST.
#[derive(Debug, Clone)]
pub struct Joined {
    /// SDP answer.
    pub answer: String,
    /// `Location` as the server sent it (usually a path).
    pub location: String,
    /// `ETag` as the server sent it (with quotes, if any).
    pub etag: String,
    /// The participant's public id (`Participant-Id`; without that header,
    /// the last path segment of `Location`).
    pub id: String,
}

fn agent() -> &'static Agent {
    static AGENT: OnceLock<Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(15)))
            .max_redirects(0)
            .build()
            .into()
    })
}

/// Percent-encode a path segment or query value (RFC 3986 unreserved kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Resolve a `Location` against the base URL (`http://host:port`).
pub fn resolve(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    let base = base.trim_end_matches('/');
    // Keep only scheme://authority of the base.
    let authority_end = base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(base.len());
    let root = &base[..authority_end];
    if location.starts_with('/') {
        format!("{root}{location}")
    } else {
        format!("{root}/{location}")
    }
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn read_body(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    resp.body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default()
}

/// Adds `Authorization: Bearer <token>` when there is a token.
fn bearer<B>(req: ureq::RequestBuilder<B>, token: Option<&str>) -> ureq::RequestBuilder<B> {
    match token {
        Some(t) => req.header("Authorization", format!("Bearer {t}")),
        None => req,
    }
}

/// An access token for a server run with `--auth-secret`: JWT, HS256,
/// `sub` = `identity`, for `room`, publish and subscribe, valid for `ttl`.
pub fn mint_token(
    secret: &[u8],
    room: &str,
    identity: &str,
    ttl: Duration,
) -> Result<String, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    mint_claims(
        secret,
        &serde_json::json!({
            "sub": identity,
            "room": room,
            "iat": now,
            "exp": now.saturating_add(ttl.as_secs()),
        }),
    )
}

/// Signs arbitrary claims (HS256): admin tokens, restricted rights, expired
/// tokens for tests.
pub fn mint_claims(secret: &[u8], claims: &serde_json::Value) -> Result<String, String> {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .map_err(|e| format!("cannot sign the token: {e}"))
}

/// The most redirects (307/308) a join follows: a cluster sends a refused
/// join to one node with room, never in a chain.
const MAX_REDIRECTS: usize = 3;

/// `POST {url}/api/v1/rooms/{room}/participants?name={name}` with an SDP
/// offer, following a cluster's redirect (307) to the node that takes it.
pub fn post_offer(url: &str, room: &str, name: &str, offer_sdp: &str) -> Result<Joined, JoinError> {
    post_offer_auth(url, room, name, offer_sdp, None)
}

/// [`post_offer`] with an optional bearer token.
pub fn post_offer_auth(
    url: &str,
    room: &str,
    name: &str,
    offer_sdp: &str,
    token: Option<&str>,
) -> Result<Joined, JoinError> {
    let target = format!(
        "{}/api/v1/rooms/{}/participants?name={}",
        url.trim_end_matches('/'),
        encode_component(room),
        encode_component(name)
    );
    let mut target = target;
    let mut hops = 0;
    let mut resp = loop {
        let resp = bearer(agent().post(&target), token)
            .header("Content-Type", "application/sdp")
            .send(offer_sdp)
            .map_err(|e| JoinError::local(format!("POST {target}: {e}")))?;
        // A cluster node that cannot take the join sends it on to one that
        // can (307, docs/api.md): the same request, to its Location.
        let status = resp.status().as_u16();
        match header(&resp, "location") {
            Some(next) if matches!(status, 307 | 308) && hops < MAX_REDIRECTS => {
                target = resolve(&target, &next);
                hops += 1;
            }
            _ => break resp,
        }
    };
    let status = resp.status().as_u16();
    let retry_after = header(&resp, "retry-after").and_then(|v| v.trim().parse().ok());
    // After a redirect, the resource lives on the node that took the join:
    // its Location is made absolute, so that DELETE and PATCH go there.
    let location =
        header(&resp, "location").map(|l| if hops == 0 { l } else { resolve(&target, &l) });
    let etag = header(&resp, "etag").unwrap_or_default();
    let participant_id = header(&resp, "participant-id");
    let body = read_body(&mut resp);
    if status != 201 {
        return Err(JoinError {
            status: Some(status),
            body,
            retry_after,
        });
    }
    let Some(location) = location else {
        return Err(JoinError {
            status: Some(status),
            body: format!("201 without Location header; body: {body}"),
            retry_after,
        });
    };
    // The public id (rosters, slots); the Location's last segment is a
    // secret capability, used by servers that send no Participant-Id.
    let id = participant_id.unwrap_or_else(|| {
        location
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    });
    Ok(Joined {
        answer: body,
        location,
        etag,
        id,
    })
}

/// `DELETE {location}`; 204 (or 200) is success.
pub fn delete(url: &str, location: &str) -> Result<(), JoinError> {
    delete_auth(url, location, None)
}

/// [`delete`] with an optional bearer token.
pub fn delete_auth(url: &str, location: &str, token: Option<&str>) -> Result<(), JoinError> {
    let target = resolve(url, location);
    let mut resp = bearer(agent().delete(&target), token)
        .call()
        .map_err(|e| JoinError::local(format!("DELETE {target}: {e}")))?;
    let status = resp.status().as_u16();
    let body = read_body(&mut resp);
    if status == 204 || status == 200 {
        Ok(())
    } else {
        Err(JoinError {
            status: Some(status),
            body,
            retry_after: None,
        })
    }
}

/// `PATCH {location}` with `If-Match` and a new offer; returns (answer, new etag).
pub fn patch_offer(
    url: &str,
    location: &str,
    etag: &str,
    offer_sdp: &str,
) -> Result<(String, String), JoinError> {
    patch_offer_auth(url, location, etag, offer_sdp, None)
}

/// [`patch_offer`] with an optional bearer token.
pub fn patch_offer_auth(
    url: &str,
    location: &str,
    etag: &str,
    offer_sdp: &str,
    token: Option<&str>,
) -> Result<(String, String), JoinError> {
    let target = resolve(url, location);
    let mut resp = bearer(agent().patch(&target), token)
        .header("Content-Type", "application/sdp")
        .header("If-Match", etag)
        .send(offer_sdp)
        .map_err(|e| JoinError::local(format!("PATCH {target}: {e}")))?;
    let status = resp.status().as_u16();
    let new_etag = header(&resp, "etag").unwrap_or_default();
    let body = read_body(&mut resp);
    if status == 200 {
        Ok((body, new_etag))
    } else {
        Err(JoinError {
            status: Some(status),
            body,
            retry_after: None,
        })
    }
}

/// `GET {url}{path}` returning the JSON body (for health/room queries in tests and the bench).
pub fn get_json(url: &str, path: &str) -> Result<serde_json::Value, JoinError> {
    get_json_auth(url, path, None)
}

/// [`get_json`] with an optional bearer token.
pub fn get_json_auth(
    url: &str,
    path: &str,
    token: Option<&str>,
) -> Result<serde_json::Value, JoinError> {
    let target = resolve(url, path);
    let mut resp = bearer(agent().get(&target), token)
        .call()
        .map_err(|e| JoinError::local(format!("GET {target}: {e}")))?;
    let status = resp.status().as_u16();
    let body = read_body(&mut resp);
    if status != 200 {
        return Err(JoinError {
            status: Some(status),
            body,
            retry_after: None,
        });
    }
    serde_json::from_str(&body).map_err(|e| JoinError {
        status: Some(status),
        body: format!("bad JSON ({e}): {body}"),
        retry_after: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_location() {
        assert_eq!(
            resolve("http://127.0.0.1:7070", "/api/v1/rooms/a/participants/x"),
            "http://127.0.0.1:7070/api/v1/rooms/a/participants/x"
        );
        assert_eq!(
            resolve("http://127.0.0.1:7070/", "/whip/r/1"),
            "http://127.0.0.1:7070/whip/r/1"
        );
        assert_eq!(resolve("http://h:1/base", "/x"), "http://h:1/x");
        assert_eq!(resolve("http://h:1", "http://o:2/y"), "http://o:2/y");
    }

    #[test]
    fn encode() {
        assert_eq!(encode_component("Alice Smith/1"), "Alice%20Smith%2F1");
        assert_eq!(encode_component("r-1_a.b~"), "r-1_a.b~");
    }

    #[test]
    fn minted_tokens_carry_the_claims() {
        let t = mint_token(b"k", "r1", "alice", Duration::from_secs(60)).unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        v.set_required_spec_claims(&["exp", "sub"]);
        let d = jsonwebtoken::decode::<serde_json::Value>(
            &t,
            &jsonwebtoken::DecodingKey::from_secret(b"k"),
            &v,
        )
        .unwrap();
        assert_eq!(d.claims["sub"], "alice");
        assert_eq!(d.claims["room"], "r1");
        assert!(d.claims["exp"].as_u64().unwrap() > d.claims["iat"].as_u64().unwrap());
    }

    #[test]
    fn connection_refused_is_an_error_not_a_panic() {
        // Port 9 (discard) on localhost is essentially never listening.
        let e = post_offer("http://127.0.0.1:9", "r", "n", "v=0").unwrap_err();
        assert_eq!(e.status, None);
    }
}
