//! The relay envelope: how one node's datagram reaches another node's relay
//! socket sealed, and how the receiver opens it.
//!
//! Every relay datagram is authenticated and encrypted with AES-128-GCM
//! under a key that belongs to one direction of one node pair in one
//! incarnation of the sender. The key is derived with HKDF-SHA256 from the
//! cluster secret, the sender's key epoch and the (sender, receiver) node
//! ids, so a key never serves two directions, two pairs or two runs of the
//! same node. The 64-bit sequence number of the header is the nonce: a
//! [`Sealer`] never repeats one under a key, and an [`Opener`] accepts each
//! at most once (a sliding window of [`REPLAY_WINDOW`] sequence numbers,
//! as IPsec and DTLS keep one).
//!
//! ```text
//!  0         1                5                        13                       21
//! +---------+----------------+------------------------+------------------------+--------------+-----------+
//! | version | sender tag u32 | key epoch u64          | sequence u64           | ciphertext … | tag (16)  |
//! +---------+----------------+------------------------+------------------------+--------------+-----------+
//! ```
//!
//! All integers are big-endian. The 21-byte header is the AEAD's associated
//! data, so changing any bit of it fails the tag like a bit of the payload.
//! The sender tag is the first four bytes of SHA-256 over the sender's node
//! id ([`SenderTag::of`]): it finds the key without carrying the id; two
//! node ids whose tags collide are refused when the receiver registers the
//! second ([`RegisterError::TagCollision`]).
//!
//! The key epoch is the sender's, chosen once per process (its start time in
//! Unix milliseconds is the intended value, the directory's
//! `NodeRecord::epoch`): a node that restarts counts its sequence from 0
//! again, which under the old key would be a replay. The receiver learns
//! the epoch from the directory and registers the sender under it; a
//! datagram of another epoch is an unknown sender.
//!
//! Opening never allocates, never panics, and leaves the receiver's state
//! untouched unless the datagram was genuine and new: a forged, damaged,
//! replayed or too old datagram changes nothing (the caller counts it by
//! its [`OpenError`]). Neither type prints a key or the secret in `Debug`.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest;
use aws_lc_rs::hkdf;

/// The envelope's version byte (the first of every relay datagram).
pub const VERSION: u8 = 1;
/// Bytes before the ciphertext: version, sender tag, key epoch, sequence.
pub const HEADER_LEN: usize = 1 + 4 + 8 + 8;
/// The AES-GCM tag after the ciphertext.
pub const TAG_LEN: usize = 16;
/// What sealing adds to a payload.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// How many sequence numbers below the highest one accepted an [`Opener`]
/// still takes once each (a reordered datagram farther behind is
/// [`OpenError::TooOld`]).
pub const REPLAY_WINDOW: u64 = 1024;

const WINDOW_WORDS: usize = (REPLAY_WINDOW / 64) as usize;
const HKDF_SALT: &[u8] = b"corelay relay v1";
const HKDF_LABEL: &[u8] = b"corelay relay key";
const TAG_LABEL: &[u8] = b"corelay relay sender tag v1\0";
const ROOM_KEY_LABEL: &[u8] = b"corelay room id key v1";

/// The secret every node of a cluster shares (read from
/// `--cluster-secret-file`). Its bytes never appear in `Debug` or in an
/// error, and are overwritten when it is dropped.
pub struct ClusterSecret {
    bytes: Box<[u8]>,
}

/// Why a cluster secret was refused. Says nothing of the secret's content.
#[derive(Debug)]
pub enum SecretError {
    /// Fewer than [`ClusterSecret::MIN_LEN`] bytes (after trimming a file's
    /// trailing whitespace).
    TooShort { len: usize },
    /// The file could not be read.
    Io(std::io::Error),
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { len } => write!(
                f,
                "the cluster secret has {len} bytes; it needs at least {}",
                ClusterSecret::MIN_LEN
            ),
            Self::Io(err) => write!(f, "cannot read the cluster secret file: {err}"),
        }
    }
}

impl std::error::Error for SecretError {}

impl ClusterSecret {
    /// The shortest secret taken: 128 bits, if they are random.
    pub const MIN_LEN: usize = 16;

    /// Takes the secret's bytes as they are.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, SecretError> {
        let mut bytes = bytes.into_boxed_slice();
        if bytes.len() < Self::MIN_LEN {
            let len = bytes.len();
            bytes.fill(0);
            return Err(SecretError::TooShort { len });
        }
        Ok(Self { bytes })
    }

    /// Reads the secret from a file, without its trailing whitespace (the
    /// newline an editor or `echo` leaves).
    pub fn read_file(path: &Path) -> Result<Self, SecretError> {
        let mut bytes = std::fs::read(path).map_err(SecretError::Io)?;
        let kept = bytes.trim_ascii_end().len();
        for byte in bytes.iter_mut().skip(kept) {
            *byte = 0;
        }
        bytes.truncate(kept);
        Self::from_bytes(bytes)
    }

    /// The key every node of the cluster names rooms with (a room's id is
    /// a keyed hash of its name, the same on every node): HKDF of the
    /// secret under its own label, so it says nothing of the relay keys.
    pub fn room_key(&self) -> (u64, u64) {
        struct Len16;
        impl hkdf::KeyType for Len16 {
            fn len(&self) -> usize {
                16
            }
        }
        let mut out = [0u8; 16];
        let filled = self
            .prk()
            .expand(&[ROOM_KEY_LABEL], Len16)
            .and_then(|okm| okm.fill(&mut out));
        if filled.is_err() {
            // HKDF-SHA256 gives 16 bytes for any label; never reached.
            return (0, 0);
        }
        let (a, b) = out.split_at(8);
        let word = |x: &[u8]| x.iter().fold(0u64, |w, byte| (w << 8) | u64::from(*byte));
        (word(a), word(b))
    }

    fn prk(&self) -> hkdf::Prk {
        hkdf::Salt::new(hkdf::HKDF_SHA256, HKDF_SALT).extract(&self.bytes)
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl Drop for ClusterSecret {
    fn drop(&mut self) {
        self.bytes.fill(0);
        std::hint::black_box(&self.bytes);
    }
}

/// A sender's short name in the header: the first four bytes of SHA-256
/// over its node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderTag(pub u32);

impl SenderTag {
    /// The tag of the node named `node_id`.
    pub fn of(node_id: &str) -> Self {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(TAG_LABEL);
        ctx.update(node_id.as_bytes());
        let digest = ctx.finish();
        let mut first = [0u8; 4];
        for (out, byte) in first.iter_mut().zip(digest.as_ref()) {
            *out = *byte;
        }
        Self(u32::from_be_bytes(first))
    }
}

/// The key of the direction `sender` → `receiver` in the sender's epoch.
fn derive_key(prk: &hkdf::Prk, epoch: u64, sender: &str, receiver: &str) -> Option<LessSafeKey> {
    let epoch = epoch.to_be_bytes();
    let sender_len = u16::try_from(sender.len()).ok()?.to_be_bytes();
    let receiver_len = u16::try_from(receiver.len()).ok()?.to_be_bytes();
    let info: [&[u8]; 6] = [
        HKDF_LABEL,
        &epoch,
        &sender_len,
        sender.as_bytes(),
        &receiver_len,
        receiver.as_bytes(),
    ];
    let okm = prk.expand(&info, &AES_128_GCM).ok()?;
    Some(LessSafeKey::new(UnboundKey::from(okm)))
}

fn nonce(seq: u64) -> Nonce {
    let mut bytes = [0u8; NONCE_LEN];
    for (out, byte) in bytes.iter_mut().skip(NONCE_LEN - 8).zip(seq.to_be_bytes()) {
        *out = byte;
    }
    Nonce::assume_unique_for_key(bytes)
}

fn header(tag: SenderTag, epoch: u64, seq: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    let fields = std::iter::once(VERSION)
        .chain(tag.0.to_be_bytes())
        .chain(epoch.to_be_bytes())
        .chain(seq.to_be_bytes());
    for (slot, byte) in out.iter_mut().zip(fields) {
        *slot = byte;
    }
    out
}

/// Why a key could not be made: a node id longer than 65535 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyError;

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no relay key for a node id longer than 65535 bytes")
    }
}

impl std::error::Error for KeyError {}

/// Why a payload was not sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// All 2^64 − 1 sequence numbers of this key are spent: the sender must
    /// take a new epoch (never reached: at 10 million datagrams a second it
    /// takes 58 000 years).
    Exhausted,
    /// AES-GCM refused the payload (over 64 GiB).
    TooLong,
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exhausted => f.write_str("the relay key's sequence numbers are spent"),
            Self::TooLong => f.write_str("the relay payload is too long to seal"),
        }
    }
}

impl std::error::Error for SealError {}

/// Seals the datagrams of one direction (this node → one peer) in this
/// node's epoch.
pub struct Sealer {
    key: LessSafeKey,
    tag: SenderTag,
    epoch: u64,
    next_seq: u64,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("tag", &self.tag)
            .field("epoch", &self.epoch)
            .field("next_seq", &self.next_seq)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// The sealer of `local` → `peer`, `local` being in `epoch`.
    pub fn new(
        secret: &ClusterSecret,
        epoch: u64,
        local: &str,
        peer: &str,
    ) -> Result<Self, KeyError> {
        let key = derive_key(&secret.prk(), epoch, local, peer).ok_or(KeyError)?;
        Ok(Self {
            key,
            tag: SenderTag::of(local),
            epoch,
            next_seq: 0,
        })
    }

    /// The sequence number the next datagram will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Writes the sealed datagram for `payload` into `out` (cleared first;
    /// it allocates only when `out` must grow, so a reused buffer does not).
    pub fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), SealError> {
        let seq = self.next_seq;
        let next = seq.checked_add(1).ok_or(SealError::Exhausted)?;
        let header = header(self.tag, self.epoch, seq);
        out.clear();
        out.reserve(OVERHEAD + payload.len());
        out.extend_from_slice(&header);
        out.extend_from_slice(payload);
        let body = out.get_mut(HEADER_LEN..).ok_or(SealError::TooLong)?;
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(seq), Aad::from(header), body)
            .map_err(|_| SealError::TooLong)?;
        out.extend_from_slice(tag.as_ref());
        self.next_seq = next;
        Ok(())
    }
}

/// Why a datagram was dropped. None of them changed the opener's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenError {
    /// Shorter than a header and a tag, or of another version.
    Malformed,
    /// No sender registered under this tag and epoch.
    UnknownSender,
    /// The tag does not authenticate the header and payload: forged,
    /// damaged, or sealed under another secret.
    BadTag,
    /// A sequence number inside the window, already accepted.
    Replayed,
    /// A sequence number [`REPLAY_WINDOW`] or more below the highest
    /// accepted.
    TooOld,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed relay datagram",
            Self::UnknownSender => "relay datagram from an unknown sender or epoch",
            Self::BadTag => "relay datagram failed authentication",
            Self::Replayed => "replayed relay datagram",
            Self::TooOld => "relay datagram too old for the replay window",
        })
    }
}

impl std::error::Error for OpenError {}

/// A genuine, new datagram, opened in place.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    /// Who sealed it.
    pub sender: SenderTag,
    /// In which of the sender's epochs.
    pub epoch: u64,
    /// Its sequence number.
    pub seq: u64,
    /// The plaintext, inside the buffer given to [`Opener::open`].
    pub payload: &'a [u8],
}

/// Which sequence numbers were accepted: the highest one and, for the
/// [`REPLAY_WINDOW`] below it and including it, one bit each, at
/// `seq % REPLAY_WINDOW`.
#[derive(Debug, Clone, Default)]
struct ReplayWindow {
    /// The highest sequence number accepted, if any was.
    highest: Option<u64>,
    bits: [u64; WINDOW_WORDS],
}

impl ReplayWindow {
    fn slot(seq: u64) -> (usize, u64) {
        let index = seq % REPLAY_WINDOW;
        ((index / 64) as usize, 1u64 << (index % 64))
    }

    /// Whether `seq` may be accepted (without accepting it).
    fn check(&self, seq: u64) -> Result<(), OpenError> {
        let Some(highest) = self.highest else {
            return Ok(());
        };
        if seq > highest {
            return Ok(());
        }
        if highest - seq >= REPLAY_WINDOW {
            return Err(OpenError::TooOld);
        }
        let (word, bit) = Self::slot(seq);
        match self.bits.get(word) {
            Some(bits) if bits & bit == 0 => Ok(()),
            _ => Err(OpenError::Replayed),
        }
    }

    /// Accepts `seq`, which [`Self::check`] allowed.
    fn accept(&mut self, seq: u64) {
        match self.highest {
            None => {
                self.bits = [0; WINDOW_WORDS];
                self.highest = Some(seq);
            }
            Some(highest) if seq > highest => {
                let advance = seq - highest;
                if advance >= REPLAY_WINDOW {
                    self.bits = [0; WINDOW_WORDS];
                } else {
                    // The slots of highest+1 ..= seq held numbers now out of
                    // the window.
                    for gone in highest.saturating_add(1)..=seq {
                        let (word, bit) = Self::slot(gone);
                        if let Some(bits) = self.bits.get_mut(word) {
                            *bits &= !bit;
                        }
                    }
                }
                self.highest = Some(seq);
            }
            Some(_) => {}
        }
        let (word, bit) = Self::slot(seq);
        if let Some(bits) = self.bits.get_mut(word) {
            *bits |= bit;
        }
    }
}

struct Peer {
    node_id: Box<str>,
    epoch: u64,
    key: LessSafeKey,
    window: ReplayWindow,
}

/// Why a sender was not registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// Another registered node id has the same [`SenderTag`]: rename one.
    TagCollision { registered: String },
    /// No key for this id ([`KeyError`]).
    Key,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TagCollision { registered } => write!(
                f,
                "the node id's relay sender tag is already taken by node {registered:?}; rename one of them"
            ),
            Self::Key => fmt::Display::fmt(&KeyError, f),
        }
    }
}

impl std::error::Error for RegisterError {}

/// Opens the datagrams this node receives, from every registered sender.
pub struct Opener {
    prk: hkdf::Prk,
    local: Box<str>,
    peers: HashMap<SenderTag, Peer>,
}

impl fmt::Debug for Opener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut peers: Vec<(&str, u64)> = self
            .peers
            .values()
            .map(|peer| (&*peer.node_id, peer.epoch))
            .collect();
        peers.sort_unstable();
        f.debug_struct("Opener")
            .field("local", &self.local)
            .field("peers", &peers)
            .finish_non_exhaustive()
    }
}

impl Opener {
    /// The opener of the node `local`, with no sender registered yet.
    pub fn new(secret: &ClusterSecret, local: &str) -> Self {
        Self {
            prk: secret.prk(),
            local: local.into(),
            peers: HashMap::new(),
        }
    }

    /// Registers `peer` in its `epoch` (from its directory record), with a
    /// fresh replay window. Registering it again in the same epoch keeps its
    /// window; in another epoch, replaces its key and window (it restarted).
    pub fn add_sender(&mut self, peer: &str, epoch: u64) -> Result<SenderTag, RegisterError> {
        let tag = SenderTag::of(peer);
        if let Some(known) = self.peers.get(&tag) {
            if *known.node_id != *peer {
                return Err(RegisterError::TagCollision {
                    registered: known.node_id.to_string(),
                });
            }
            if known.epoch == epoch {
                return Ok(tag);
            }
        }
        let key = derive_key(&self.prk, epoch, peer, &self.local).ok_or(RegisterError::Key)?;
        self.peers.insert(
            tag,
            Peer {
                node_id: peer.into(),
                epoch,
                key,
                window: ReplayWindow::default(),
            },
        );
        Ok(tag)
    }

    /// Forgets `peer`: its datagrams are from an unknown sender from now on.
    pub fn remove_sender(&mut self, peer: &str) {
        let tag = SenderTag::of(peer);
        if self
            .peers
            .get(&tag)
            .is_some_and(|known| *known.node_id == *peer)
        {
            self.peers.remove(&tag);
        }
    }

    /// The node id registered under `tag`.
    pub fn sender_id(&self, tag: SenderTag) -> Option<&str> {
        self.peers.get(&tag).map(|peer| &*peer.node_id)
    }

    /// Authenticates and decrypts `datagram` in place. On success the
    /// payload is a part of `datagram`; on failure `datagram` may have been
    /// overwritten and the opener is as it was.
    pub fn open<'a>(&mut self, datagram: &'a mut [u8]) -> Result<Opened<'a>, OpenError> {
        if datagram.len() < OVERHEAD {
            return Err(OpenError::Malformed);
        }
        let (head, body) = datagram
            .split_at_mut_checked(HEADER_LEN)
            .ok_or(OpenError::Malformed)?;
        let head: &[u8; HEADER_LEN] = (&*head).try_into().map_err(|_| OpenError::Malformed)?;
        let [
            version,
            t0,
            t1,
            t2,
            t3,
            e0,
            e1,
            e2,
            e3,
            e4,
            e5,
            e6,
            e7,
            s0,
            s1,
            s2,
            s3,
            s4,
            s5,
            s6,
            s7,
        ] = *head;
        if version != VERSION {
            return Err(OpenError::Malformed);
        }
        let sender = SenderTag(u32::from_be_bytes([t0, t1, t2, t3]));
        let epoch = u64::from_be_bytes([e0, e1, e2, e3, e4, e5, e6, e7]);
        let seq = u64::from_be_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
        let peer = self
            .peers
            .get_mut(&sender)
            .filter(|peer| peer.epoch == epoch)
            .ok_or(OpenError::UnknownSender)?;
        peer.window.check(seq)?;
        let plain = peer
            .key
            .open_in_place(nonce(seq), Aad::from(*head), body)
            .map_err(|_| OpenError::BadTag)?;
        peer.window.accept(seq);
        Ok(Opened {
            sender,
            epoch,
            seq,
            payload: plain,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef-the-cluster-secret";

    fn secret() -> ClusterSecret {
        ClusterSecret::from_bytes(SECRET.to_vec()).unwrap()
    }

    /// A sealer a → b and b's opener with a registered.
    fn pair() -> (Sealer, Opener) {
        let secret = secret();
        let sealer = Sealer::new(&secret, 7, "node-a", "node-b").unwrap();
        let mut opener = Opener::new(&secret, "node-b");
        opener.add_sender("node-a", 7).unwrap();
        (sealer, opener)
    }

    fn seal(sealer: &mut Sealer, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        sealer.seal(payload, &mut out).unwrap();
        out
    }

    /// Opens a copy, so that the caller keeps the datagram.
    fn open(opener: &mut Opener, datagram: &[u8]) -> Result<Vec<u8>, OpenError> {
        let mut copy = datagram.to_vec();
        opener.open(&mut copy).map(|opened| opened.payload.to_vec())
    }

    #[test]
    fn seal_then_open_round_trips() {
        let (mut sealer, mut opener) = pair();
        for (i, payload) in [&b"hello"[..], b"", &[0xAB; 1400]].into_iter().enumerate() {
            let mut datagram = seal(&mut sealer, payload);
            assert_eq!(datagram.len(), payload.len() + OVERHEAD);
            if !payload.is_empty() {
                assert_ne!(&datagram[HEADER_LEN..HEADER_LEN + payload.len()], payload);
            }
            let opened = opener.open(&mut datagram).unwrap();
            assert_eq!(opened.payload, payload);
            assert_eq!(opened.sender, SenderTag::of("node-a"));
            assert_eq!(opened.epoch, 7);
            assert_eq!(opened.seq, i as u64);
        }
        assert_eq!(opener.sender_id(SenderTag::of("node-a")), Some("node-a"));
    }

    #[test]
    fn a_reused_output_buffer_does_not_grow() {
        let (mut sealer, _) = pair();
        let mut out = Vec::new();
        sealer.seal(&[1; 1200], &mut out).unwrap();
        let capacity = out.capacity();
        for _ in 0..100 {
            sealer.seal(&[2; 1200], &mut out).unwrap();
        }
        assert_eq!(out.capacity(), capacity);
    }

    #[test]
    fn any_flipped_bit_fails() {
        let (mut sealer, mut opener) = pair();
        let datagram = seal(&mut sealer, b"a payload of some length");
        for bit in 0..datagram.len() * 8 {
            let mut bad = datagram.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let err = open(&mut opener, &bad).unwrap_err();
            // Version → Malformed, tag or epoch → UnknownSender, the rest BadTag.
            let expected = match bit / 8 {
                0 => OpenError::Malformed,
                1..=12 => OpenError::UnknownSender,
                _ => OpenError::BadTag,
            };
            assert_eq!(err, expected, "bit {bit}");
        }
        // The failures changed nothing: the genuine one still opens, once.
        assert_eq!(
            open(&mut opener, &datagram).unwrap(),
            b"a payload of some length"
        );
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::Replayed));
    }

    #[test]
    fn a_wrong_secret_or_direction_or_epoch_fails() {
        let (mut sealer, _) = pair();
        let datagram = seal(&mut sealer, b"payload");

        let other = ClusterSecret::from_bytes(b"another secret, as long".to_vec()).unwrap();
        let mut opener = Opener::new(&other, "node-b");
        opener.add_sender("node-a", 7).unwrap();
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::BadTag));

        // The same secret, but the receiver is not the one sealed for.
        let mut opener = Opener::new(&secret(), "node-c");
        opener.add_sender("node-a", 7).unwrap();
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::BadTag));

        // The reverse direction's key is another key.
        let mut reverse = Sealer::new(&secret(), 7, "node-b", "node-a").unwrap();
        let back = seal(&mut reverse, b"payload");
        let mut opener = Opener::new(&secret(), "node-b");
        opener.add_sender("node-b", 7).unwrap();
        assert_eq!(open(&mut opener, &back), Err(OpenError::BadTag));

        // Registered in another epoch (the sender restarted).
        let mut opener = Opener::new(&secret(), "node-b");
        opener.add_sender("node-a", 8).unwrap();
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::UnknownSender));

        // Not registered at all, or forgotten.
        let mut opener = Opener::new(&secret(), "node-b");
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::UnknownSender));
        opener.add_sender("node-a", 7).unwrap();
        opener.remove_sender("node-a");
        assert_eq!(open(&mut opener, &datagram), Err(OpenError::UnknownSender));
    }

    #[test]
    fn a_restarted_sender_starts_a_fresh_window() {
        let secret = secret();
        let mut opener = Opener::new(&secret, "node-b");
        opener.add_sender("node-a", 1).unwrap();
        let mut first = Sealer::new(&secret, 1, "node-a", "node-b").unwrap();
        for _ in 0..5000 {
            let d = seal(&mut first, b"x");
            open(&mut opener, &d).unwrap();
        }
        // Registering again in the same epoch keeps the window.
        opener.add_sender("node-a", 1).unwrap();
        let mut again = Sealer::new(&secret, 1, "node-a", "node-b").unwrap();
        assert_eq!(
            open(&mut opener, &seal(&mut again, b"x")),
            Err(OpenError::TooOld)
        );
        // A new epoch: sequence 0 again, accepted.
        let mut second = Sealer::new(&secret, 2, "node-a", "node-b").unwrap();
        let d = seal(&mut second, b"x");
        assert_eq!(open(&mut opener, &d), Err(OpenError::UnknownSender));
        opener.add_sender("node-a", 2).unwrap();
        assert_eq!(open(&mut opener, &d).unwrap(), b"x");
        let old = seal(&mut first, b"x");
        assert_eq!(open(&mut opener, &old), Err(OpenError::UnknownSender));
    }

    #[test]
    fn a_replayed_datagram_is_refused() {
        let (mut sealer, mut opener) = pair();
        let d = seal(&mut sealer, b"once");
        assert_eq!(open(&mut opener, &d).unwrap(), b"once");
        assert_eq!(open(&mut opener, &d), Err(OpenError::Replayed));
        let next = seal(&mut sealer, b"twice");
        assert_eq!(open(&mut opener, &next).unwrap(), b"twice");
        assert_eq!(open(&mut opener, &d), Err(OpenError::Replayed));
        assert_eq!(open(&mut opener, &next), Err(OpenError::Replayed));
    }

    #[test]
    fn reordering_within_the_window_is_accepted_once() {
        let (mut sealer, mut opener) = pair();
        let all: Vec<Vec<u8>> = (0..REPLAY_WINDOW)
            .map(|i| seal(&mut sealer, &i.to_be_bytes()))
            .collect();
        // The newest first, then the rest from the oldest on: all within
        // the window.
        let last = all.last().unwrap();
        open(&mut opener, last).unwrap();
        for (i, d) in all.iter().enumerate().take(all.len() - 1) {
            assert_eq!(open(&mut opener, d).unwrap(), (i as u64).to_be_bytes());
        }
        for d in &all {
            assert_eq!(open(&mut opener, d), Err(OpenError::Replayed));
        }
    }

    #[test]
    fn too_old_is_refused() {
        let (mut sealer, mut opener) = pair();
        let oldest = seal(&mut sealer, b"0");
        let edge = seal(&mut sealer, b"1");
        let mut last = Vec::new();
        for _ in 2..=REPLAY_WINDOW {
            last = seal(&mut sealer, b"n");
        }
        // Highest accepted: REPLAY_WINDOW. Sequence 1 is REPLAY_WINDOW − 1
        // behind (inside), sequence 0 REPLAY_WINDOW behind (outside).
        open(&mut opener, &last).unwrap();
        assert_eq!(open(&mut opener, &oldest), Err(OpenError::TooOld));
        assert_eq!(open(&mut opener, &edge).unwrap(), b"1");
        assert_eq!(open(&mut opener, &edge), Err(OpenError::Replayed));
    }

    #[test]
    fn the_window_advances_by_large_jumps() {
        let mut window = ReplayWindow::default();
        let mut accepted = std::collections::BTreeSet::new();
        let mut seq = 0u64;
        let mut rng = fastrand::Rng::with_seed(49);
        for _ in 0..20_000 {
            // Mostly forward by small and large steps, sometimes back.
            seq = match rng.u8(..10) {
                0 => seq.saturating_sub(rng.u64(..2 * REPLAY_WINDOW)),
                1 => seq + rng.u64(..10 * REPLAY_WINDOW),
                2 => seq + REPLAY_WINDOW + rng.u64(..3),
                _ => seq + rng.u64(..4),
            };
            let highest = accepted.last().copied();
            let expected = match highest {
                Some(h) if seq <= h && h - seq >= REPLAY_WINDOW => Err(OpenError::TooOld),
                _ if accepted.contains(&seq) => Err(OpenError::Replayed),
                _ => Ok(()),
            };
            assert_eq!(window.check(seq), expected, "seq {seq} highest {highest:?}");
            if expected.is_ok() {
                window.accept(seq);
                accepted.insert(seq);
            }
        }
        // Near the end of the sequence space nothing overflows.
        let mut window = ReplayWindow::default();
        window.accept(u64::MAX - 1);
        assert_eq!(window.check(u64::MAX), Ok(()));
        window.accept(u64::MAX);
        assert_eq!(window.check(u64::MAX), Err(OpenError::Replayed));
        assert_eq!(window.check(u64::MAX - 1), Err(OpenError::Replayed));
        assert_eq!(window.check(0), Err(OpenError::TooOld));
    }

    #[test]
    fn a_jump_past_the_window_through_the_opener() {
        let (mut sealer, mut opener) = pair();
        let early: Vec<Vec<u8>> = (0..4).map(|_| seal(&mut sealer, b"e")).collect();
        open(&mut opener, &early[0]).unwrap();
        sealer.next_seq = 5 * REPLAY_WINDOW;
        let far = seal(&mut sealer, b"far");
        assert_eq!(open(&mut opener, &far).unwrap(), b"far");
        for d in &early {
            assert_eq!(open(&mut opener, d), Err(OpenError::TooOld));
        }
        // Just inside the window behind the jump: fine, once.
        sealer.next_seq = 4 * REPLAY_WINDOW + 1;
        let inside = seal(&mut sealer, b"in");
        assert_eq!(open(&mut opener, &inside).unwrap(), b"in");
        assert_eq!(open(&mut opener, &inside), Err(OpenError::Replayed));
    }

    #[test]
    fn truncated_and_empty_input_is_malformed() {
        let (mut sealer, mut opener) = pair();
        let d = seal(&mut sealer, b"payload");
        for len in 0..OVERHEAD {
            assert_eq!(open(&mut opener, &d[..len]), Err(OpenError::Malformed));
        }
        // Long enough, but cut: the tag fails.
        for len in OVERHEAD..d.len() {
            assert_eq!(open(&mut opener, &d[..len]), Err(OpenError::BadTag));
        }
        assert_eq!(open(&mut opener, &d).unwrap(), b"payload");
    }

    #[test]
    fn random_mutations_never_panic_and_never_open() {
        let (mut sealer, mut opener) = pair();
        let mut rng = fastrand::Rng::with_seed(0xC0_4E_1A_49);
        for round in 0..300u32 {
            let payload: Vec<u8> = (0..rng.usize(..300)).map(|_| rng.u8(..)).collect();
            let datagram = seal(&mut sealer, &payload);
            for _ in 0..20 {
                let mut bad = datagram.clone();
                for _ in 0..rng.usize(1..4) {
                    match rng.u8(..6) {
                        0 if !bad.is_empty() => {
                            let i = rng.usize(..bad.len());
                            bad[i] ^= 1 << rng.u8(..8);
                        }
                        1 if !bad.is_empty() => {
                            let i = rng.usize(..bad.len());
                            bad[i] = rng.u8(..);
                        }
                        2 => bad.truncate(rng.usize(..=bad.len())),
                        3 => bad.push(rng.u8(..)),
                        4 if !bad.is_empty() => {
                            let i = rng.usize(..bad.len());
                            bad.insert(i, rng.u8(..));
                        }
                        _ if !bad.is_empty() => {
                            let i = rng.usize(..bad.len());
                            bad.remove(i);
                        }
                        _ => {}
                    }
                }
                if bad == datagram {
                    continue;
                }
                assert!(
                    open(&mut opener, &bad).is_err(),
                    "round {round}: a modified datagram opened"
                );
            }
            // Random bytes, as an attacker would send them.
            let junk: Vec<u8> = (0..rng.usize(..100)).map(|_| rng.u8(..)).collect();
            assert!(open(&mut opener, &junk).is_err());
            // The genuine datagram still opens: the failures changed nothing.
            assert_eq!(open(&mut opener, &datagram).unwrap(), payload);
        }
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let secret = secret();
        let (sealer, opener) = pair();
        let text = format!("{secret:?} {sealer:?} {opener:?} {secret:#?}");
        assert!(!text.contains("0123456789abcdef"), "{text}");
        assert!(text.contains("redacted"));
        let too_short = ClusterSecret::from_bytes(b"short-secret".to_vec()).unwrap_err();
        assert!(!format!("{too_short} {too_short:?}").contains("short-secret"));
    }

    #[test]
    fn a_secret_file_loses_its_trailing_newline() {
        let dir = std::env::temp_dir().join(format!("corelay-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        std::fs::write(&path, [SECRET, b"\n"].concat()).unwrap();
        let from_file = ClusterSecret::read_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut sealer = Sealer::new(&from_file, 1, "a", "b").unwrap();
        let mut opener = Opener::new(&secret(), "b");
        opener.add_sender("a", 1).unwrap();
        assert_eq!(open(&mut opener, &seal(&mut sealer, b"p")).unwrap(), b"p");
        assert!(matches!(
            ClusterSecret::read_file(Path::new("/nonexistent/corelay-secret")),
            Err(SecretError::Io(_))
        ));
    }
}
