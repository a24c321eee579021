//! A TURN client over UDP (RFC 8656), enough for a load-client participant
//! to reach the server through coturn: it allocates a relay with the
//! long-term credential mechanism (the 401 challenge, then requests signed
//! with MESSAGE-INTEGRITY under MD5(username:realm:password)), installs a
//! permission for the server's address, binds a channel to it, and from
//! then on wraps everything the participant sends in ChannelData (Send
//! indications to any other address of the server) and unwraps what coturn
//! relays back (ChannelData, Data indications), refreshing allocation,
//! permission and channel before they expire.
//!
//! The participant's str0m session does not know: it keeps its host
//! candidate, and the server's ICE-lite agent sees its checks arrive from
//! coturn's relayed address (a peer-reflexive candidate), which is exactly
//! what a browser's relay candidate looks like to it.
//!
//! Hand-written: the STUN encoder str0m ships (the `is` crate) has the TURN
//! methods but not REQUESTED-TRANSPORT, without which no Allocate succeeds.
//! MD5 and HMAC-SHA1 are OpenSSL's (already linked for the server's DTLS).
//!
//! Credentials for coturn's `use-auth-secret` ("TURN REST API") scheme are
//! minted with [`rest_credentials`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const MAGIC: u32 = 0x2112_A442;

// Message types (method | class).
const ALLOCATE: u16 = 0x0003;
const REFRESH: u16 = 0x0004;
const SEND_INDICATION: u16 = 0x0016;
const DATA_INDICATION: u16 = 0x0017;
const CREATE_PERMISSION: u16 = 0x0008;
const CHANNEL_BIND: u16 = 0x0009;
const SUCCESS: u16 = 0x0100;
const ERROR: u16 = 0x0110;
const BINDING_SUCCESS: u16 = 0x0101;

// Attributes.
const USERNAME: u16 = 0x0006;
const MESSAGE_INTEGRITY: u16 = 0x0008;
const ERROR_CODE: u16 = 0x0009;
const CHANNEL_NUMBER: u16 = 0x000C;
const LIFETIME: u16 = 0x000D;
const XOR_PEER_ADDRESS: u16 = 0x0012;
const DATA: u16 = 0x0013;
const REALM: u16 = 0x0014;
const NONCE: u16 = 0x0015;
const XOR_RELAYED_ADDRESS: u16 = 0x0016;
const REQUESTED_TRANSPORT: u16 = 0x0019;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;

/// The channel bound to the server's media address (0x4000..=0x4FFF).
pub const CHANNEL: u16 = 0x4000;
/// Allocation lifetime asked for (coturn's default is 600 s).
const LIFETIME_ASKED: u32 = 600;
/// Permissions last 300 s, channel bindings 600 s (RFC 8656 §9, §12):
/// both are refreshed this often, the allocation a minute before its end.
const PERMISSION_REFRESH: Duration = Duration::from_secs(240);
/// How long a blocking transaction waits for its answer, per try.
const RTO: Duration = Duration::from_millis(500);
const TRIES: usize = 4;

/// A TURN server and the credentials to use there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnServer {
    /// Its UDP address.
    pub addr: SocketAddr,
    /// Username (for coturn's REST scheme, `expiry:identity`).
    pub username: String,
    /// Password.
    pub password: String,
}

/// coturn's `use-auth-secret` credentials for `identity`, valid for `ttl`
/// from `now_unix` (seconds): username `expiry:identity`, password
/// base64(HMAC-SHA1(secret, username)).
pub fn rest_credentials(
    secret: &[u8],
    identity: &str,
    now_unix: u64,
    ttl: Duration,
) -> Result<(String, String), String> {
    let username = format!("{}:{identity}", now_unix.saturating_add(ttl.as_secs()));
    let mac = hmac_sha1(secret, &[username.as_bytes()])?;
    Ok((username, openssl::base64::encode_block(&mac)))
}

/// HMAC-SHA1 of `parts` under `key` (OpenSSL).
pub(crate) fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> Result<[u8; 20], String> {
    let pkey = openssl::pkey::PKey::hmac(key).map_err(|e| format!("hmac key: {e}"))?;
    let mut s = openssl::sign::Signer::new(openssl::hash::MessageDigest::sha1(), &pkey)
        .map_err(|e| format!("hmac: {e}"))?;
    for p in parts {
        s.update(p).map_err(|e| format!("hmac: {e}"))?;
    }
    let v = s.sign_to_vec().map_err(|e| format!("hmac: {e}"))?;
    let mut out = [0u8; 20];
    if v.len() != out.len() {
        return Err("hmac: not 20 bytes".into());
    }
    out.copy_from_slice(&v);
    Ok(out)
}

/// The long-term credential key: MD5(username ":" realm ":" password)
/// (RFC 8489 §9.2.2; the password is ASCII here, so SASLprep is identity).
fn long_term_key(username: &str, realm: &str, password: &str) -> Result<Vec<u8>, String> {
    let s = format!("{username}:{realm}:{password}");
    openssl::hash::hash(openssl::hash::MessageDigest::md5(), s.as_bytes())
        .map(|d| d.to_vec())
        .map_err(|e| format!("md5: {e}"))
}

fn new_tid() -> [u8; 12] {
    let mut t = [0u8; 12];
    for b in &mut t {
        *b = fastrand::u8(..);
    }
    t
}

/// A STUN message being written.
struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    fn new(ty: u16, tid: &[u8; 12]) -> Msg {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&ty.to_be_bytes());
        buf.extend_from_slice(&[0, 0]);
        buf.extend_from_slice(&MAGIC.to_be_bytes());
        buf.extend_from_slice(tid);
        Msg { buf }
    }

    fn set_len(&mut self) {
        let len = u16::try_from(self.buf.len().saturating_sub(20)).unwrap_or(u16::MAX);
        if let Some(l) = self.buf.get_mut(2..4) {
            l.copy_from_slice(&len.to_be_bytes());
        }
    }

    fn attr(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&ty.to_be_bytes());
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(value);
        let pad = (4 - value.len() % 4) % 4;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
        self
    }

    fn xor_addr(&mut self, ty: u16, addr: SocketAddr) -> &mut Self {
        let tid = tid_of(&self.buf);
        let v = encode_xor_addr(addr, &tid);
        self.attr(ty, &v)
    }

    /// Credentials and MESSAGE-INTEGRITY (last attribute; no FINGERPRINT,
    /// which TURN does not require).
    fn sign(mut self, auth: Option<&Auth>) -> Result<Vec<u8>, String> {
        if let Some(a) = auth {
            self.attr(USERNAME, a.username.as_bytes());
            self.attr(REALM, a.realm.as_bytes());
            self.attr(NONCE, a.nonce.as_bytes());
            // The length counts the MESSAGE-INTEGRITY attribute (24 bytes)
            // when the HMAC is computed over everything before it.
            let len = u16::try_from(self.buf.len() + 24 - 20).map_err(|_| "message too long")?;
            if let Some(l) = self.buf.get_mut(2..4) {
                l.copy_from_slice(&len.to_be_bytes());
            }
            let mac = hmac_sha1(&a.key, &[&self.buf])?;
            self.attr(MESSAGE_INTEGRITY, &mac);
        }
        self.set_len();
        Ok(self.buf)
    }
}

fn tid_of(buf: &[u8]) -> [u8; 12] {
    let mut t = [0u8; 12];
    if let Some(s) = buf.get(8..20) {
        t.copy_from_slice(s);
    }
    t
}

fn encode_xor_addr(addr: SocketAddr, tid: &[u8; 12]) -> Vec<u8> {
    let port = addr.port() ^ (MAGIC >> 16) as u16;
    let mut v = Vec::with_capacity(20);
    match addr.ip() {
        IpAddr::V4(ip) => {
            v.extend_from_slice(&[0, 1]);
            v.extend_from_slice(&port.to_be_bytes());
            v.extend_from_slice(&(u32::from(ip) ^ MAGIC).to_be_bytes());
        }
        IpAddr::V6(ip) => {
            v.extend_from_slice(&[0, 2]);
            v.extend_from_slice(&port.to_be_bytes());
            for (o, m) in ip.octets().iter().zip(v6_mask(tid)) {
                v.push(o ^ m);
            }
        }
    }
    v
}

/// What an IPv6 address is XORed with: the magic cookie, then the
/// transaction id.
fn v6_mask(tid: &[u8; 12]) -> impl Iterator<Item = u8> + '_ {
    MAGIC.to_be_bytes().into_iter().chain(tid.iter().copied())
}

fn decode_xor_addr(v: &[u8], tid: &[u8; 12]) -> Option<SocketAddr> {
    let family = *v.get(1)?;
    let port = u16::from_be_bytes([*v.get(2)?, *v.get(3)?]) ^ (MAGIC >> 16) as u16;
    match family {
        1 => {
            let raw: [u8; 4] = v.get(4..8)?.try_into().ok()?;
            let ip = Ipv4Addr::from(u32::from_be_bytes(raw) ^ MAGIC);
            Some(SocketAddr::new(ip.into(), port))
        }
        2 => {
            let raw = v.get(4..20)?;
            let mut o = [0u8; 16];
            for ((d, r), m) in o.iter_mut().zip(raw).zip(v6_mask(tid)) {
                *d = r ^ m;
            }
            Some(SocketAddr::new(Ipv6Addr::from(o).into(), port))
        }
        _ => None,
    }
}

/// A parsed STUN message: its type, transaction id and attributes (by
/// type, values borrowed).
pub struct Parsed<'a> {
    /// Message type.
    pub ty: u16,
    /// Transaction id.
    pub tid: [u8; 12],
    attrs: Vec<(u16, &'a [u8])>,
}

impl<'a> Parsed<'a> {
    /// Parse `b` as STUN (None: not STUN, or malformed).
    pub fn parse(b: &'a [u8]) -> Option<Parsed<'a>> {
        let ty = u16::from_be_bytes([*b.first()?, *b.get(1)?]);
        if ty & 0xC000 != 0 || b.get(4..8)? != MAGIC.to_be_bytes() {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([*b.get(2)?, *b.get(3)?]));
        let body = b.get(20..20 + len)?;
        let mut attrs = Vec::new();
        let mut at = 0usize;
        // Bounded by the body's length: every step advances at least 4.
        while at + 4 <= body.len() {
            let t = u16::from_be_bytes([*body.get(at)?, *body.get(at + 1)?]);
            let l = usize::from(u16::from_be_bytes([*body.get(at + 2)?, *body.get(at + 3)?]));
            let v = body.get(at + 4..at + 4 + l)?;
            attrs.push((t, v));
            at += 4 + l + (4 - l % 4) % 4;
        }
        Some(Parsed {
            ty,
            tid: tid_of(b),
            attrs,
        })
    }

    fn get(&self, ty: u16) -> Option<&'a [u8]> {
        self.attrs.iter().find(|(t, _)| *t == ty).map(|(_, v)| *v)
    }

    fn text(&self, ty: u16) -> Option<String> {
        self.get(ty)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_string)
    }

    fn addr(&self, ty: u16) -> Option<SocketAddr> {
        decode_xor_addr(self.get(ty)?, &self.tid)
    }

    /// ERROR-CODE as a number (e.g. 401).
    fn error(&self) -> Option<u16> {
        let v = self.get(ERROR_CODE)?;
        Some(u16::from(*v.get(2)? & 0x7) * 100 + u16::from(*v.get(3)?))
    }

    fn lifetime(&self) -> Option<u32> {
        let v: [u8; 4] = self.get(LIFETIME)?.try_into().ok()?;
        Some(u32::from_be_bytes(v))
    }

    /// XOR-MAPPED-ADDRESS of a binding success response (what the agent
    /// that answered saw as our address).
    pub fn mapped(&self) -> Option<SocketAddr> {
        (self.ty == BINDING_SUCCESS)
            .then(|| self.addr(XOR_MAPPED_ADDRESS))
            .flatten()
    }
}

/// Long-term credential state: realm and nonce from the server's
/// challenge, and the key.
#[derive(Debug, Clone)]
struct Auth {
    username: String,
    password: String,
    realm: String,
    nonce: String,
    key: Vec<u8>,
}

impl Auth {
    /// Take realm and nonce from a 401 or 438 answer.
    fn challenge(&mut self, m: &Parsed<'_>) -> Result<(), String> {
        let realm = m.text(REALM).ok_or("challenge without REALM")?;
        self.nonce = m.text(NONCE).ok_or("challenge without NONCE")?;
        if realm != self.realm || self.key.is_empty() {
            self.key = long_term_key(&self.username, &realm, &self.password)?;
            self.realm = realm;
        }
        Ok(())
    }
}

/// Builds a request: its transaction id and, once challenged, the
/// credentials to sign it with.
type BuildRequest<'a> = dyn Fn(&[u8; 12], Option<&Auth>) -> Result<Vec<u8>, String> + 'a;

/// Send `req(auth)` and wait for its answer, retransmitting; a 401 or
/// 438 is answered once more with the new nonce. Datagrams of other
/// transactions are ignored.
fn transact(
    sock: &UdpSocket,
    server: SocketAddr,
    auth: &mut Auth,
    authed: bool,
    req: &BuildRequest<'_>,
) -> Result<Vec<u8>, String> {
    let mut use_auth = authed;
    let mut buf = vec![0u8; 2048];
    for _round in 0..3 {
        let tid = new_tid();
        let msg = req(&tid, use_auth.then_some(&*auth))?;
        let mut answer = None;
        'tries: for _ in 0..TRIES {
            sock.send_to(&msg, server)
                .map_err(|e| format!("send to {server}: {e}"))?;
            let until = Instant::now() + RTO;
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                sock.set_read_timeout(Some(left))
                    .map_err(|e| format!("set_read_timeout: {e}"))?;
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let Some(got) = buf.get(..n) else { continue };
                if from != server || Parsed::parse(got).is_none_or(|m| m.tid != tid) {
                    continue;
                }
                answer = Some(got.to_vec());
                break 'tries;
            }
        }
        let Some(answer) = answer else {
            return Err(format!("no answer from the TURN server {server}"));
        };
        let Some(m) = Parsed::parse(&answer) else {
            return Err("unparsable answer".into());
        };
        if m.ty & 0x0110 == SUCCESS {
            return Ok(answer);
        }
        match m.error() {
            Some(401 | 438) => {
                auth.challenge(&m)?;
                use_auth = true;
            }
            code => {
                let reason = m
                    .get(ERROR_CODE)
                    .and_then(|v| v.get(4..))
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                return Err(format!("TURN error {code:?} {reason}"));
            }
        }
    }
    Err("TURN server kept challenging".into())
}

/// What the participant's driver needs to send and receive through a relay.
pub struct Relay {
    /// The TURN server.
    pub server: SocketAddr,
    /// coturn's relayed address (what the server sees us as).
    pub relayed: SocketAddr,
    /// The server's media address, bound to [`CHANNEL`].
    pub peer: SocketAddr,
    auth: Auth,
    lifetime: Duration,
    /// When the allocation, and the permission and channel, are refreshed next.
    refresh_at: Instant,
    permission_at: Instant,
    /// Transactions in flight (refreshes) and what they were.
    pending: Vec<([u8; 12], u16)>,
    /// Scratch for wrapping.
    out: Vec<u8>,
    /// Counters.
    pub refreshes: u64,
    /// Refresh errors answered by the server (stale nonces retried).
    pub errors: u64,
    /// What the server's latest binding success response said our address
    /// was (XOR-MAPPED-ADDRESS): coturn's relayed address when it works.
    pub server_saw: Option<SocketAddr>,
}

impl Relay {
    /// On blocking `sock`: allocate a relay on `turn` (the 401 challenge,
    /// then authenticated). The peer is set by [`Relay::bind`].
    pub fn allocate(sock: &UdpSocket, turn: &TurnServer) -> Result<Relay, String> {
        let mut auth = Auth {
            username: turn.username.clone(),
            password: turn.password.clone(),
            realm: String::new(),
            nonce: String::new(),
            key: Vec::new(),
        };
        let answer = transact(sock, turn.addr, &mut auth, false, &|tid, a| {
            let mut m = Msg::new(ALLOCATE, tid);
            // UDP (17), three bytes reserved.
            m.attr(REQUESTED_TRANSPORT, &[17, 0, 0, 0]);
            m.attr(LIFETIME, &LIFETIME_ASKED.to_be_bytes());
            m.sign(a)
        })?;
        let m = Parsed::parse(&answer).ok_or("unparsable Allocate answer")?;
        let relayed = m
            .addr(XOR_RELAYED_ADDRESS)
            .ok_or("Allocate success without XOR-RELAYED-ADDRESS")?;
        let lifetime = Duration::from_secs(u64::from(m.lifetime().unwrap_or(LIFETIME_ASKED)));
        let now = Instant::now();
        Ok(Relay {
            server: turn.addr,
            relayed,
            peer: relayed,
            auth,
            lifetime,
            refresh_at: now + refresh_in(lifetime),
            permission_at: now + PERMISSION_REFRESH,
            pending: Vec::new(),
            out: Vec::with_capacity(1600),
            refreshes: 0,
            errors: 0,
            server_saw: None,
        })
    }

    /// On blocking `sock`: a permission for `peer`'s address and
    /// [`CHANNEL`] bound to `peer`.
    pub fn bind(&mut self, sock: &UdpSocket, peer: SocketAddr) -> Result<(), String> {
        transact(sock, self.server, &mut self.auth, true, &|tid, a| {
            let mut m = Msg::new(CREATE_PERMISSION, tid);
            m.xor_addr(XOR_PEER_ADDRESS, peer);
            m.sign(a)
        })?;
        transact(sock, self.server, &mut self.auth, true, &|tid, a| {
            let mut m = Msg::new(CHANNEL_BIND, tid);
            m.attr(CHANNEL_NUMBER, &[(CHANNEL >> 8) as u8, CHANNEL as u8, 0, 0]);
            m.xor_addr(XOR_PEER_ADDRESS, peer);
            m.sign(a)
        })?;
        self.peer = peer;
        Ok(())
    }

    /// `data` for `dest`, wrapped for the TURN server: ChannelData to the
    /// bound peer, a Send indication to any other address.
    pub fn wrap(&mut self, dest: SocketAddr, data: &[u8]) -> &[u8] {
        self.out.clear();
        if dest == self.peer {
            let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
            self.out.extend_from_slice(&CHANNEL.to_be_bytes());
            self.out.extend_from_slice(&len.to_be_bytes());
            self.out.extend_from_slice(data);
        } else {
            let mut m = Msg::new(SEND_INDICATION, &new_tid());
            m.xor_addr(XOR_PEER_ADDRESS, dest);
            m.attr(DATA, data);
            m.set_len();
            self.out = m.buf;
        }
        &self.out
    }

    /// A datagram from the TURN server: the relayed datagram and who sent
    /// it, or None when it was TURN's own (a refresh's answer, handled).
    pub fn unwrap<'a>(&mut self, data: &'a [u8]) -> Option<(SocketAddr, &'a [u8])> {
        let first = *data.first()?;
        if (0x40..=0x4F).contains(&first) {
            let ch = u16::from_be_bytes([first, *data.get(1)?]);
            let len = usize::from(u16::from_be_bytes([*data.get(2)?, *data.get(3)?]));
            let payload = data.get(4..4 + len)?;
            if ch != CHANNEL {
                return None;
            }
            self.note(payload);
            return Some((self.peer, payload));
        }
        let m = Parsed::parse(data)?;
        if m.ty == DATA_INDICATION {
            let from = m.addr(XOR_PEER_ADDRESS)?;
            let payload = m.get(DATA)?;
            self.note(payload);
            return Some((from, payload));
        }
        // An answer to one of our refreshes.
        let i = self.pending.iter().position(|(t, _)| *t == m.tid)?;
        let (_, method) = self.pending.swap_remove(i);
        if m.ty & 0x0110 == ERROR {
            self.errors += 1;
            // A stale nonce: take the new one and ask again at once.
            if matches!(m.error(), Some(401 | 438)) && self.auth.challenge(&m).is_ok() {
                if method == REFRESH {
                    self.refresh_at = Instant::now();
                } else {
                    self.permission_at = Instant::now();
                }
            }
        } else if method == REFRESH {
            self.refreshes += 1;
            if let Some(l) = m.lifetime() {
                self.lifetime = Duration::from_secs(u64::from(l));
                self.refresh_at = Instant::now() + refresh_in(self.lifetime);
            }
        }
        None
    }

    /// Remember what the server said our address was (its binding
    /// success responses; cheap: one byte tested per relayed datagram).
    fn note(&mut self, payload: &[u8]) {
        if payload.first() == Some(&0x01) && payload.get(1) == Some(&0x01) {
            if let Some(a) = Parsed::parse(payload).and_then(|m| m.mapped()) {
                self.server_saw = Some(a);
            }
        }
    }

    /// When [`Relay::poll`] has something to send next.
    pub fn next_due(&self) -> Instant {
        self.refresh_at.min(self.permission_at)
    }

    /// Refreshes due at `now` (allocation; permission and channel), each
    /// handed to `send` (bound for the TURN server).
    pub fn poll(&mut self, now: Instant, send: &mut dyn FnMut(&[u8])) {
        if now >= self.refresh_at {
            self.refresh_at = now + refresh_in(self.lifetime);
            let life = LIFETIME_ASKED;
            if let Some(msg) = self.request(REFRESH, &|m| {
                m.attr(LIFETIME, &life.to_be_bytes());
            }) {
                send(&msg);
            }
        }
        if now >= self.permission_at {
            self.permission_at = now + PERMISSION_REFRESH;
            let peer = self.peer;
            if let Some(msg) = self.request(CREATE_PERMISSION, &|m| {
                m.xor_addr(XOR_PEER_ADDRESS, peer);
            }) {
                send(&msg);
            }
            if let Some(msg) = self.request(CHANNEL_BIND, &|m| {
                m.attr(CHANNEL_NUMBER, &[(CHANNEL >> 8) as u8, CHANNEL as u8, 0, 0]);
                m.xor_addr(XOR_PEER_ADDRESS, peer);
            }) {
                send(&msg);
            }
        }
    }

    /// A Refresh with LIFETIME 0, for the TURN server: the allocation is
    /// given back at once (its relay port freed) instead of when it would
    /// have ended.
    pub fn release(&mut self) -> Option<Vec<u8>> {
        self.request(REFRESH, &|m| {
            m.attr(LIFETIME, &0u32.to_be_bytes());
        })
    }

    fn request(&mut self, ty: u16, fill: &dyn Fn(&mut Msg)) -> Option<Vec<u8>> {
        let tid = new_tid();
        let mut m = Msg::new(ty, &tid);
        fill(&mut m);
        let msg = m.sign(Some(&self.auth)).ok()?;
        if self.pending.len() >= 8 {
            self.pending.remove(0);
        }
        self.pending.push((tid, ty));
        Some(msg)
    }
}

/// Refresh an allocation a minute before it ends (half way for short ones).
fn refresh_in(lifetime: Duration) -> Duration {
    if lifetime > Duration::from_secs(120) {
        lifetime - Duration::from_secs(60)
    } else {
        lifetime / 2
    }
}

/// The server's UDP media address in an SDP answer: its first UDP host
/// candidate.
pub fn udp_candidate(sdp: &str) -> Option<SocketAddr> {
    sdp.lines().find_map(|l| {
        let c = l.trim().strip_prefix("a=candidate:")?;
        let f: Vec<&str> = c.split_whitespace().collect();
        if !f.get(2)?.eq_ignore_ascii_case("udp") {
            return None;
        }
        let ip: IpAddr = f.get(4)?.parse().ok()?;
        let port: u16 = f.get(5)?.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rest_credentials_match_coturn() {
        // printf '%s' 1700000000:alice | openssl dgst -sha1 -hmac s3cret -binary | base64
        let (u, p) = rest_credentials(
            b"s3cret",
            "alice",
            1_700_000_000 - 60,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(u, "1700000000:alice");
        assert_eq!(p, "TtElzSjT0GdnTQ9xdcRNxx96yQs=");
    }

    #[test]
    fn rfc_5769_long_term_key_and_xor_address() {
        // printf '%s' user:realm:pass | md5sum
        let k = long_term_key("user", "realm", "pass").unwrap();
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "8493fbc53ba582fb4c044c456bdc40eb");
        // RFC 5769 2.2: 192.0.2.1:32853 with this transaction id.
        let tid = [
            0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae,
        ];
        let a: SocketAddr = "192.0.2.1:32853".parse().unwrap();
        let v = encode_xor_addr(a, &tid);
        assert_eq!(v, [0, 1, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43]);
        assert_eq!(decode_xor_addr(&v, &tid), Some(a));
        let a6: SocketAddr = "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
            .parse()
            .unwrap();
        assert_eq!(decode_xor_addr(&encode_xor_addr(a6, &tid), &tid), Some(a6));
    }

    #[test]
    fn signed_messages_verify_and_parse() {
        let auth = Auth {
            username: "u".into(),
            password: "p".into(),
            realm: "r".into(),
            nonce: "n".into(),
            key: long_term_key("u", "r", "p").unwrap(),
        };
        let tid = new_tid();
        let mut m = Msg::new(ALLOCATE, &tid);
        m.attr(REQUESTED_TRANSPORT, &[17, 0, 0, 0]);
        let bytes = m.sign(Some(&auth)).unwrap();
        let p = Parsed::parse(&bytes).unwrap();
        assert_eq!(p.ty, ALLOCATE);
        assert_eq!(p.tid, tid);
        assert_eq!(p.text(USERNAME).as_deref(), Some("u"));
        assert_eq!(p.text(NONCE).as_deref(), Some("n"));
        // MESSAGE-INTEGRITY is the last attribute and covers the rest,
        // with the length as str0m's STUN verifier computes it.
        let mi = p.get(MESSAGE_INTEGRITY).unwrap();
        let before = bytes.len() - 24;
        let mut head = bytes[..before].to_vec();
        head[2..4].copy_from_slice(&((bytes.len() - 20) as u16).to_be_bytes());
        assert_eq!(mi, hmac_sha1(&auth.key, &[&head]).unwrap());
        assert!(Parsed::parse(&bytes[..bytes.len() - 1]).is_none());
        assert!(Parsed::parse(&[0x80, 0, 0, 0]).is_none());
    }

    #[test]
    fn channel_data_and_indications_round_trip() {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        let mut r = Relay {
            server: "127.0.0.1:3478".parse().unwrap(),
            relayed: "127.0.0.1:49152".parse().unwrap(),
            peer,
            auth: Auth {
                username: "u".into(),
                password: "p".into(),
                realm: "r".into(),
                nonce: "n".into(),
                key: vec![0; 16],
            },
            lifetime: Duration::from_secs(600),
            refresh_at: Instant::now(),
            permission_at: Instant::now() + Duration::from_secs(100),
            pending: Vec::new(),
            out: Vec::new(),
            refreshes: 0,
            errors: 0,
            server_saw: None,
        };
        let wrapped = r.wrap(peer, b"hello").to_vec();
        assert_eq!(&wrapped[..4], &[0x40, 0, 0, 5]);
        assert_eq!(r.unwrap(&wrapped), Some((peer, &b"hello"[..])));
        // Padded ChannelData (as over TCP) is read by its length.
        let mut padded = wrapped.clone();
        padded.extend_from_slice(&[0, 0, 0]);
        assert_eq!(r.unwrap(&padded), Some((peer, &b"hello"[..])));
        let send = r.wrap(other, b"x").to_vec();
        let p = Parsed::parse(&send).unwrap();
        assert_eq!(p.ty, SEND_INDICATION);
        assert_eq!(p.addr(XOR_PEER_ADDRESS), Some(other));
        // A Data indication comes back the same way.
        let mut d = Msg::new(DATA_INDICATION, &new_tid());
        d.xor_addr(XOR_PEER_ADDRESS, other).attr(DATA, b"yo");
        d.set_len();
        assert_eq!(r.unwrap(&d.buf), Some((other, &b"yo"[..])));
        // A refresh is due at once; its answer is TURN's own.
        let mut sent = Vec::new();
        r.poll(Instant::now(), &mut |m| sent.push(m.to_vec()));
        assert_eq!(sent.len(), 1);
        let req = Parsed::parse(&sent[0]).unwrap();
        let mut ok = Msg::new(REFRESH | SUCCESS, &req.tid);
        ok.attr(LIFETIME, &300u32.to_be_bytes());
        ok.set_len();
        assert_eq!(r.unwrap(&ok.buf), None);
        assert_eq!(r.refreshes, 1);
        assert!(r.next_due() > Instant::now() + Duration::from_secs(90));
        // The server's binding response through the channel is noted.
        let mut b = Msg::new(BINDING_SUCCESS, &new_tid());
        b.xor_addr(XOR_MAPPED_ADDRESS, r.relayed);
        b.set_len();
        let w = r.wrap(peer, &b.buf).to_vec();
        assert!(r.unwrap(&w).is_some());
        assert_eq!(r.server_saw, Some(r.relayed));
        // Giving it back: a signed Refresh with LIFETIME 0.
        let bye = r.release().unwrap();
        let p = Parsed::parse(&bye).unwrap();
        assert_eq!((p.ty, p.lifetime()), (REFRESH, Some(0)));
        assert!(p.get(MESSAGE_INTEGRITY).is_some());
    }

    #[test]
    fn the_answers_udp_candidate() {
        let sdp = "v=0\r\na=candidate:1 1 tcp 2130706431 127.0.0.1 7000 typ host tcptype passive\r\n\
                   a=candidate:2 1 UDP 2130706431 127.0.0.1 7001 typ host\r\n";
        assert_eq!(udp_candidate(sdp), Some("127.0.0.1:7001".parse().unwrap()));
        assert_eq!(udp_candidate("v=0\r\n"), None);
    }
}
