//! DTLS 1.2 for str0m over OpenSSL.
//!
//! str0m 0.25's own DTLS (dimpl) asks clients for ECDSA certificates only: its
//! CertificateRequest lists `ecdsa_sign` and ECDSA signature algorithms, and
//! its verifier rejects RSA. GStreamer's webrtcbin (simple-whip-client, OBS
//! builds on GStreamer) and older libwebrtc builds make RSA certificates, so
//! their handshake ends in `sslv3 alert handshake failure` (issue 10).
//! OpenSSL takes both. [`provider`] is str0m's default crypto provider (aws-lc-rs:
//! SRTP, hashes, certificate generation) with this DTLS in place of dimpl's,
//! so the per-packet path (SRTP) is unchanged; only the handshake moves.
//!
//! Owns: one OpenSSL DTLS session per peer behind str0m's `DtlsInstance`
//! (sans-I/O: datagrams in through [`DtlsInstance::handle_packet`], out through
//! [`DtlsInstance::poll_output`]), its retransmission timer, the DTLS-SRTP
//! key export. Must not: verify the peer's certificate beyond requiring one
//! (str0m compares its fingerprint with the SDP's), block, or read a clock
//! of its own except OpenSSL's retransmission timer (see [`Session::timeout`]).
//!
//! Everything here runs on a shard thread with bytes from the network:
//! no unwrap, expect, panic or slice indexing; queues are bounded.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use dimpl::{CryptoError as DimplCrypto, CryptoOperation, Error as DtlsImplError};
use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::pkey::PKey;
use openssl::srtp::SrtpProfileId;
use openssl::ssl::{
    ErrorCode, HandshakeError, MidHandshakeSslStream, Ssl, SslContext, SslContextBuilder,
    SslMethod, SslOptions, SslRef, SslSessionCacheMode, SslStream, SslVerifyMode,
};
use openssl::x509::X509;
use str0m::crypto::CryptoProvider;
use str0m::crypto::dtls::{
    DtlsCert, DtlsInstance, DtlsOutput, DtlsProvider, DtlsVersion, KeyingMaterial, ProtocolVersion,
    SrtpProfile,
};

/// str0m's default provider with OpenSSL's DTLS: install it with
/// `provider().install_process_default()` before the first `Rtc`.
pub fn provider() -> CryptoProvider {
    static DTLS: OpensslDtls = OpensslDtls;
    CryptoProvider {
        dtls_provider: &DTLS,
        ..str0m::crypto::from_feature_flags()
    }
}

/// ECDHE only (forward secrecy), AEAD first. A server with an ECDSA
/// certificate (ours) picks among the ECDSA suites; the RSA ones are for the
/// rare peer that makes us the DTLS client and holds an RSA certificate.
const CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384:\
ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:\
ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA";

/// In our order of preference: AES-128-GCM is the cheapest per packet with
/// AES-NI (one pass, no separate HMAC), and what browsers prefer too.
const SRTP_PROFILES: &str = "SRTP_AEAD_AES_128_GCM:SRTP_AEAD_AES_256_GCM:SRTP_AES128_CM_SHA1_80";

/// RFC 5764 §4.2.
const SRTP_LABEL: &str = "EXTRACTOR-dtls_srtp";

/// Datagrams waiting for OpenSSL. Every `handle_packet` drives the session
/// at once, so more than one means OpenSSL stopped reading: refuse rather
/// than grow.
const MAX_INCOMING: usize = 4;
/// Records OpenSSL has written and str0m has not polled yet: a handshake
/// flight is a handful, application data (SCTP) is polled after each send.
const MAX_OUTGOING: usize = 256;
/// Decrypted application data (SCTP) waiting for str0m.
const MAX_APP_DATA: usize = 256;
/// The largest datagram we hand to OpenSSL and take back.
const MAX_DATAGRAM: usize = 16 * 1024;

/// When no retransmission timer runs, str0m is asked back after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long after str0m asks a client to start its handshake begins (see
/// [`Session::request_start`]).
const START_DELAY: Duration = Duration::from_millis(1);

/// The DTLS factory: OpenSSL for the handshake, str0m's default provider
/// for the certificate (ECDSA P-256).
#[derive(Debug)]
struct OpensslDtls;

impl DtlsProvider for OpensslDtls {
    fn generate_certificate(&self) -> Option<DtlsCert> {
        str0m::crypto::from_feature_flags()
            .dtls_provider
            .generate_certificate()
    }

    /// Touches no OpenSSL state: the session is made at its first datagram
    /// or timer (see [`Session`]).
    fn new_dtls(
        &self,
        cert: &DtlsCert,
        now: Instant,
        _version: DtlsVersion,
        mtu: Option<usize>,
    ) -> Result<Box<dyn DtlsInstance>, str0m::crypto::CryptoError> {
        Ok(Box::new(Session::new(cert.clone(), mtu, now)))
    }
}

/// A new certificate (ECDSA P-256) with its OpenSSL context built: a
/// server's one identity for all its participants, made at startup before
/// any shard runs. `None` if either step fails.
pub fn server_certificate() -> Option<DtlsCert> {
    let cert = OpensslDtls.generate_certificate()?;
    match prepare(&cert) {
        Ok(()) => Some(cert),
        Err(e) => {
            tracing::error!(error = %e, "OpenSSL refused the DTLS certificate");
            None
        }
    }
}

/// Builds (once) the OpenSSL context for `cert`, so that sessions with it
/// only make their own `SSL`. Call it where OpenSSL's global state may be
/// touched, before the threads that run sessions start: a server with one
/// certificate for all its participants does so at startup.
pub fn prepare(cert: &DtlsCert) -> Result<(), ErrorStack> {
    context_for(cert).map(drop)
}

/// The context of the last certificate sessions were made with. A server
/// passes every `Rtc` the same certificate (str0m would otherwise make one
/// per `Rtc`), so this is built once and each session costs an `SSL_new`;
/// with a certificate per session it is rebuilt for each (as before).
fn context_for(cert: &DtlsCert) -> Result<SslContext, ErrorStack> {
    type Cached = Option<(Vec<u8>, Vec<u8>, SslContext)>;
    static LAST: Mutex<Cached> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((der, key, ctx)) = last.as_ref()
        && *der == cert.certificate
        && *key == cert.private_key
    {
        return Ok(ctx.clone());
    }
    let ctx = new_context(cert)?;
    *last = Some((
        cert.certificate.clone(),
        cert.private_key.clone(),
        ctx.clone(),
    ));
    Ok(ctx)
}

fn new_context(cert: &DtlsCert) -> Result<SslContext, ErrorStack> {
    let mut ctx = SslContextBuilder::new(SslMethod::dtls())?;
    ctx.set_cipher_list(CIPHERS)?;
    ctx.set_tlsext_use_srtp(SRTP_PROFILES)?;
    // Any certificate, but one there must be: str0m checks its fingerprint
    // against the SDP's a=fingerprint (RFC 8122), which is the WebRTC trust.
    ctx.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        |_, _| true,
    );
    let x509 = X509::from_der(&cert.certificate)?;
    let key = PKey::private_key_from_der(&cert.private_key)?;
    ctx.set_certificate(&x509)?;
    ctx.set_private_key(&key)?;
    ctx.check_private_key()?;
    ctx.set_options(
        SslOptions::NO_DTLSV1 | SslOptions::NO_QUERY_MTU | SslOptions::NO_RENEGOTIATION,
    );
    // WebRTC never resumes a DTLS session; a shared context would otherwise
    // keep every handshake's session (up to 20,480) under its lock.
    ctx.set_session_cache_mode(SslSessionCacheMode::OFF);
    Ok(ctx.build())
}

fn new_ssl(cert: &DtlsCert, mtu: Option<usize>) -> Result<Ssl, ErrorStack> {
    let ctx = context_for(cert)?;
    let mut ssl = Ssl::new(&ctx)?;
    // str0m's DATAGRAM_MTU_TARGET when it does not say.
    let mtu = mtu.unwrap_or(1150).clamp(256, MAX_DATAGRAM);
    ssl.set_mtu(u32::try_from(mtu).unwrap_or(1150))?;
    Ok(ssl)
}

/// The datagram pipe between OpenSSL and str0m: OpenSSL reads one datagram
/// per read and writes one record (or flight part) per write.
#[derive(Debug, Default)]
struct Pipe {
    incoming: VecDeque<Vec<u8>>,
    outgoing: VecDeque<Vec<u8>>,
}

impl io::Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(datagram) = self.incoming.pop_front() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        // A datagram larger than OpenSSL's buffer is cut, as a datagram
        // socket would; DTLS then discards the broken record.
        let n = datagram.len().min(buf.len());
        let (head, _) = buf.split_at_mut(n);
        let (src, _) = datagram.split_at(n);
        head.copy_from_slice(src);
        Ok(n)
    }
}

impl io::Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.outgoing.len() >= MAX_OUTGOING {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.outgoing.push_back(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a session is made from, when it is made.
struct Recipe {
    cert: DtlsCert,
    mtu: Option<usize>,
}

enum State {
    /// No OpenSSL object yet (see [`Session`]); datagrams wait in the pipe.
    Unmade(Box<Recipe>, Pipe),
    Handshaking(MidHandshakeSslStream<Pipe>),
    Established(SslStream<Pipe>),
    /// The handshake failed or the session closed; only queued output is left.
    Done(Pipe),
}

/// What str0m polls for besides records, in the order str0m needs them: the
/// peer's certificate first (str0m verifies its fingerprint), then the keys,
/// then `Connected`.
#[derive(Debug)]
enum Event {
    PeerCert(Vec<u8>),
    Keys(KeyingMaterial, SrtpProfile),
    Connected,
    CloseNotify,
}

/// One peer's DTLS session.
///
/// It touches no OpenSSL state until the thread that moves its packets
/// drives it: a server's session is made at its first datagram, a client's
/// at the first timer after str0m asked it to start. str0m makes each
/// `Rtc`'s DTLS instance where the `Rtc` is built and its offer answered
/// (corelay's control thread), then the `Rtc` moves to a shard. OpenSSL's
/// global locks are glibc rwlocks, whose writers spin without sleeping
/// while another writer holds the lock but has not yet said so (a window of
/// a few instructions). A shard one real-time priority above the control
/// thread on the same core (`chrt`, `corelay_thread::rise_above_siblings`)
/// that preempts it in that window spins there for good: the control thread
/// never runs again. Seen once in a bench run (`RT=1`): the shard at 100 %
/// in `pthread_rwlock_wrlock`, every participant lost. With the sessions
/// made on the shards, the control thread takes none of OpenSSL's locks.
pub struct Session {
    state: State,
    /// Records taken from the pipe after each call into OpenSSL, so that
    /// str0m's frequent polls (several per forwarded packet) never reach
    /// into OpenSSL's structures: reading the pipe goes through SSL_get_rbio.
    out: VecDeque<Vec<u8>>,
    active: Option<bool>,
    /// A client's handshake begins at a timer at or after this (str0m asked
    /// it to start: an empty datagram, or a poll).
    start_at: Option<Instant>,
    now: Instant,
    events: VecDeque<Event>,
    app_data: VecDeque<Vec<u8>>,
    version: Option<ProtocolVersion>,
    closing: bool,
}

// OpenSSL's handles are raw pointers, so not unwind safe by the compiler's
// reckoning. A panic cannot leave a Session half-updated in a way that str0m
// (which requires these bounds) would observe: the shard discards the Rtc of
// a participant whose step panicked.
impl UnwindSafe for Session {}
impl RefUnwindSafe for Session {}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Unmade(..) => "unmade",
            State::Handshaking(_) => "handshaking",
            State::Established(_) => "established",
            State::Done(_) => "done",
        };
        f.debug_struct("Session")
            .field("state", &state)
            .field("active", &self.active)
            .finish()
    }
}

fn failed(op: CryptoOperation) -> DtlsImplError {
    DtlsImplError::CryptoError(DimplCrypto::OperationFailed(op))
}

impl Session {
    fn new(cert: DtlsCert, mtu: Option<usize>, now: Instant) -> Self {
        Session {
            state: State::Unmade(Box::new(Recipe { cert, mtu }), Pipe::default()),
            out: VecDeque::new(),
            active: None,
            start_at: None,
            now,
            events: VecDeque::new(),
            app_data: VecDeque::new(),
            version: None,
            closing: false,
        }
    }

    fn pipe(&mut self) -> &mut Pipe {
        match &mut self.state {
            State::Unmade(_, pipe) | State::Done(pipe) => pipe,
            State::Handshaking(mid) => mid.get_mut(),
            State::Established(stream) => stream.get_mut(),
        }
    }

    /// Moves what OpenSSL wrote into `out`; after every call into OpenSSL.
    fn collect(&mut self) {
        let mut records = std::mem::take(&mut self.pipe().outgoing);
        if self.out.is_empty() {
            std::mem::swap(&mut self.out, &mut records);
        } else {
            self.out.append(&mut records);
        }
        // The pipe keeps its (empty) allocation for the next writes.
        self.pipe().outgoing = records;
    }

    /// A client not yet started begins at the first timer strictly after
    /// the instant str0m last gave it: str0m's own calls at that instant
    /// (where the `Rtc` is built) do not start it, the shard's next do.
    fn request_start(&mut self) {
        if self.active == Some(true)
            && self.start_at.is_none()
            && matches!(self.state, State::Unmade(..))
        {
            self.start_at = Some(self.now + START_DELAY);
        }
    }

    fn ssl(&self) -> Option<&SslRef> {
        match &self.state {
            State::Handshaking(mid) => Some(mid.ssl()),
            State::Established(stream) => Some(stream.ssl()),
            State::Unmade(..) | State::Done(_) => None,
        }
    }

    /// Moves the handshake on as far as the datagrams received allow, then
    /// reads what application data there is.
    fn drive(&mut self) -> Result<(), DtlsImplError> {
        let Some(active) = self.active else {
            return Ok(());
        };
        let state = std::mem::replace(&mut self.state, State::Done(Pipe::default()));
        let result = match state {
            State::Unmade(recipe, pipe) => {
                let ssl = match new_ssl(&recipe.cert, recipe.mtu) {
                    Ok(ssl) => ssl,
                    Err(e) => {
                        tracing::warn!(error = %e, "OpenSSL DTLS setup failed");
                        self.state = State::Done(pipe);
                        return Err(failed(CryptoOperation::StartKeyExchange));
                    }
                };
                if active {
                    ssl.connect(pipe)
                } else {
                    ssl.accept(pipe)
                }
            }
            State::Handshaking(mid) => mid.handshake(),
            other => {
                self.state = other;
                return self.read_application_data();
            }
        };
        match result {
            Ok(stream) => {
                self.established(&stream);
                self.state = State::Established(stream);
                self.read_application_data()
            }
            Err(HandshakeError::WouldBlock(mid)) => {
                self.state = State::Handshaking(mid);
                Ok(())
            }
            Err(HandshakeError::SetupFailure(e)) => {
                tracing::debug!(error = %e, "DTLS setup failed");
                Err(failed(CryptoOperation::StartKeyExchange))
            }
            Err(HandshakeError::Failure(mut mid)) => {
                // The alert OpenSSL sent (if any) is in the pipe: keep it.
                let reason = mid.error().to_string();
                let pipe = std::mem::take(mid.get_mut());
                // OpenSSL's reason (e.g. "sslv3 alert bad certificate") does
                // not fit str0m's error type: it goes to the log here, just
                // before the engine's WARN for the participant.
                tracing::info!(error = %reason, "DTLS handshake failed");
                self.state = State::Done(pipe);
                Err(failed(CryptoOperation::CompleteKeyExchange))
            }
        }
    }

    /// Queues the peer's certificate, the SRTP keys and `Connected`.
    fn established(&mut self, stream: &SslStream<Pipe>) {
        let ssl = stream.ssl();
        self.version = Some(ProtocolVersion::DTLS1_2);
        let Some(cert) = ssl.peer_certificate().and_then(|c| c.to_der().ok()) else {
            // FAIL_IF_NO_PEER_CERT makes this unreachable for a server;
            // without a certificate str0m cannot check the fingerprint, so
            // no keys either: it times out as unconnected.
            tracing::debug!("DTLS peer sent no certificate");
            return;
        };
        self.events.push_back(Event::PeerCert(cert));
        let profile = ssl.selected_srtp_profile().and_then(|p| match p.id() {
            SrtpProfileId::SRTP_AEAD_AES_128_GCM => Some(SrtpProfile::AEAD_AES_128_GCM),
            SrtpProfileId::SRTP_AEAD_AES_256_GCM => Some(SrtpProfile::AEAD_AES_256_GCM),
            SrtpProfileId::SRTP_AES128_CM_SHA1_80 => Some(SrtpProfile::AES128_CM_SHA1_80),
            _ => None,
        });
        let Some(profile) = profile else {
            tracing::debug!("DTLS peer negotiated no SRTP profile we take");
            return;
        };
        let mut keys = vec![0u8; profile.keying_material_len()];
        if let Err(e) = ssl.export_keying_material(&mut keys, SRTP_LABEL, None) {
            tracing::debug!(error = %e, "DTLS-SRTP key export failed");
            return;
        }
        self.events
            .push_back(Event::Keys(KeyingMaterial::new(&keys), profile));
        self.events.push_back(Event::Connected);
    }

    fn read_application_data(&mut self) -> Result<(), DtlsImplError> {
        let State::Established(stream) = &mut self.state else {
            return Ok(());
        };
        let mut buf = [0u8; MAX_DATAGRAM];
        loop {
            match stream.ssl_read(&mut buf) {
                Ok(n) => {
                    if self.app_data.len() >= MAX_APP_DATA {
                        return Err(DtlsImplError::ReceiveQueueFull);
                    }
                    let data = buf.get(..n).unwrap_or_default();
                    self.app_data.push_back(data.to_vec());
                }
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(()),
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                    if !self.closing {
                        self.closing = true;
                        self.events.push_back(Event::CloseNotify);
                    }
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(error = %e, "DTLS read failed");
                    return Err(failed(CryptoOperation::Decrypt));
                }
            }
        }
    }

    /// OpenSSL's retransmission timer, while it runs: the time left on
    /// OpenSSL's own (wall) clock, from str0m's `now`.
    fn timeout(&self) -> Option<Duration> {
        let ssl = self.ssl()?;
        if !matches!(self.state, State::Handshaking(_)) {
            return None;
        }
        let mut left = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        // SAFETY: DTLSv1_get_timeout(ssl, &timeval) is this SSL_ctrl call
        // (a macro in OpenSSL's headers): it writes one timeval and reads
        // nothing else; `ssl` is a live SSL owned by self.state.
        let running = unsafe {
            openssl_sys::SSL_ctrl(
                ssl.as_ptr(),
                DTLS_CTRL_GET_TIMEOUT,
                0,
                (&raw mut left).cast(),
            )
        };
        if running != 1 {
            return None;
        }
        let secs = u64::try_from(left.tv_sec).unwrap_or(0);
        let micros = u64::try_from(left.tv_usec).unwrap_or(0);
        Some(Duration::from_secs(secs) + Duration::from_micros(micros))
    }
}

/// `bytes` copied to the front of `buf`, or the length `buf` would need.
fn copy_out<'a>(buf: &'a mut [u8], bytes: &[u8]) -> Result<&'a [u8], usize> {
    let Some(out) = buf.get_mut(..bytes.len()) else {
        return Err(bytes.len());
    };
    out.copy_from_slice(bytes);
    Ok(out)
}

/// From OpenSSL's ssl.h: `DTLSv1_get_timeout` and `DTLSv1_handle_timeout`
/// are macros over `SSL_ctrl` with these commands.
const DTLS_CTRL_GET_TIMEOUT: libc::c_int = 73;
const DTLS_CTRL_HANDLE_TIMEOUT: libc::c_int = 74;

impl DtlsInstance for Session {
    fn set_active(&mut self, active: bool) {
        self.active = Some(active);
    }

    fn handle_packet(&mut self, packet: &[u8]) -> Result<(), DtlsImplError> {
        if packet.is_empty() {
            // No datagram: str0m's signal to a client to start (see `Session`).
            self.request_start();
            return Ok(());
        }
        if packet.len() > MAX_DATAGRAM {
            return Ok(());
        }
        let pipe = self.pipe();
        if pipe.incoming.len() >= MAX_INCOMING {
            return Err(DtlsImplError::ReceiveQueueFull);
        }
        pipe.incoming.push_back(packet.to_vec());
        if matches!(self.state, State::Done(_)) {
            self.pipe().incoming.clear();
            return Ok(());
        }
        let result = self.drive();
        self.collect();
        result
    }

    fn poll_output<'a>(&mut self, buf: &'a mut [u8]) -> DtlsOutput<'a> {
        // A client starts its handshake (ClientHello) at the timer this asks for.
        self.request_start();
        if let Some(record) = self.out.pop_front() {
            return match copy_out(buf, &record) {
                Ok(out) => DtlsOutput::Packet(out),
                Err(needed) => {
                    self.out.push_front(record);
                    DtlsOutput::BufferTooSmall { needed }
                }
            };
        }
        if let Some(event) = self.events.pop_front() {
            return match event {
                Event::PeerCert(der) => match copy_out(buf, &der) {
                    Ok(out) => DtlsOutput::PeerCert(out),
                    Err(needed) => {
                        self.events.push_front(Event::PeerCert(der));
                        DtlsOutput::BufferTooSmall { needed }
                    }
                },
                Event::Keys(keys, profile) => DtlsOutput::KeyingMaterial(keys, profile),
                Event::Connected => DtlsOutput::Connected,
                Event::CloseNotify => DtlsOutput::CloseNotify,
            };
        }
        if let Some(data) = self.app_data.pop_front() {
            return match copy_out(buf, &data) {
                Ok(out) => DtlsOutput::ApplicationData(out),
                Err(needed) => {
                    self.app_data.push_front(data);
                    DtlsOutput::BufferTooSmall { needed }
                }
            };
        }
        if let Some(at) = self.start_at {
            return DtlsOutput::Timeout(at);
        }
        DtlsOutput::Timeout(self.now + self.timeout().unwrap_or(IDLE_TIMEOUT))
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), DtlsImplError> {
        self.now = now;
        if self.start_at.is_some_and(|at| at <= now) {
            self.start_at = None;
            let started = self.drive();
            self.collect();
            return started;
        }
        if let State::Handshaking(mid) = &self.state {
            // SAFETY: DTLSv1_handle_timeout(ssl) is this SSL_ctrl call; it
            // retransmits the last flight into our pipe if OpenSSL's timer
            // has expired and does nothing otherwise; `ssl` is live.
            let r = unsafe {
                openssl_sys::SSL_ctrl(
                    mid.ssl().as_ptr(),
                    DTLS_CTRL_HANDLE_TIMEOUT,
                    0,
                    std::ptr::null_mut(),
                )
            };
            self.collect();
            if r < 0 {
                tracing::debug!("DTLS retransmission limit reached");
                return Err(DtlsImplError::Timeout(dimpl::TimeoutError::Handshake));
            }
        }
        Ok(())
    }

    fn send_application_data(&mut self, data: &[u8]) -> Result<usize, DtlsImplError> {
        let State::Established(stream) = &mut self.state else {
            return Ok(0);
        };
        if data.is_empty() || self.closing {
            return Ok(0);
        }
        let written = match stream.ssl_write(data) {
            Ok(n) => Ok(n),
            Err(e) if e.code() == ErrorCode::WANT_WRITE => Ok(0),
            Err(e) => {
                tracing::debug!(error = %e, "DTLS write failed");
                Err(failed(CryptoOperation::Encrypt))
            }
        };
        self.collect();
        written
    }

    fn is_active(&self) -> bool {
        self.active == Some(true)
    }

    fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    fn is_closing(&self) -> bool {
        self.closing && !self.is_closed()
    }

    fn is_closed(&self) -> bool {
        matches!(self.state, State::Done(_)) && self.out.is_empty()
    }

    fn close(&mut self) -> Result<(), DtlsImplError> {
        self.closing = true;
        let state = std::mem::replace(&mut self.state, State::Done(Pipe::default()));
        self.state = match state {
            State::Established(mut stream) => {
                // close_notify goes into the pipe; the peer's answer is not awaited.
                if let Err(e) = stream.shutdown() {
                    tracing::debug!(error = %e, "DTLS close_notify failed");
                }
                State::Done(std::mem::take(stream.get_mut()))
            }
            State::Handshaking(mut mid) => State::Done(std::mem::take(mid.get_mut())),
            State::Unmade(_, pipe) | State::Done(pipe) => State::Done(pipe),
        };
        self.collect();
        Ok(())
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    use super::*;
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::hash::MessageDigest;
    use openssl::rsa::Rsa;
    use openssl::x509::X509NameBuilder;

    /// A self-signed RSA certificate, as GStreamer's dtlsenc makes one.
    fn rsa_cert() -> DtlsCert {
        let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", "gstreamer").unwrap();
        let name = name.build();
        let mut x = X509::builder().unwrap();
        x.set_version(2).unwrap();
        x.set_serial_number(&BigNum::from_u32(1).unwrap().to_asn1_integer().unwrap())
            .unwrap();
        x.set_subject_name(&name).unwrap();
        x.set_issuer_name(&name).unwrap();
        x.set_pubkey(&key).unwrap();
        x.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        x.set_not_after(&Asn1Time::days_from_now(30).unwrap())
            .unwrap();
        x.sign(&key, MessageDigest::sha256()).unwrap();
        DtlsCert {
            certificate: x.build().to_der().unwrap(),
            private_key: key.private_key_to_der().unwrap(),
        }
    }

    fn ecdsa_cert() -> DtlsCert {
        OpensslDtls.generate_certificate().unwrap()
    }

    #[derive(Default)]
    struct Seen {
        connected: bool,
        peer_cert: Option<Vec<u8>>,
        keys: Option<(Vec<u8>, SrtpProfile)>,
        data: Vec<Vec<u8>>,
        error: bool,
    }

    /// Polls one side dry, returning its records.
    fn poll(side: &mut dyn DtlsInstance, seen: &mut Seen) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        loop {
            match side.poll_output(&mut buf) {
                DtlsOutput::Packet(p) => out.push(p.to_vec()),
                DtlsOutput::Connected => seen.connected = true,
                DtlsOutput::PeerCert(c) => seen.peer_cert = Some(c.to_vec()),
                DtlsOutput::KeyingMaterial(k, p) => seen.keys = Some((k.to_vec(), p)),
                DtlsOutput::ApplicationData(d) => seen.data.push(d.to_vec()),
                DtlsOutput::Timeout(_) => return out,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// What str0m's `Rtc::init_dtls` does when the offer is answered.
    fn init(side: &mut dyn DtlsInstance, active: bool, now: Instant) {
        side.set_active(active);
        side.handle_timeout(now).unwrap();
        if active {
            side.handle_packet(&[]).unwrap();
        }
    }

    /// The first timers on the thread that moves the packets (a client's
    /// handshake begins at one).
    fn first_timers(sides: [&mut dyn DtlsInstance; 2], now: Instant) {
        for side in sides {
            side.handle_timeout(now + Duration::from_millis(5)).unwrap();
        }
    }

    /// Runs a handshake between a client and a server; returns what each saw.
    fn handshake(client: &mut dyn DtlsInstance, server: &mut dyn DtlsInstance) -> (Seen, Seen) {
        let now = Instant::now();
        init(client, true, now);
        init(server, false, now);
        let (mut c, mut s) = (Seen::default(), Seen::default());
        first_timers([client, server], now);
        for _ in 0..20 {
            for p in poll(client, &mut c) {
                s.error |= server.handle_packet(&p).is_err();
            }
            for p in poll(server, &mut s) {
                c.error |= client.handle_packet(&p).is_err();
            }
            if (c.connected && s.connected) || c.error || s.error {
                break;
            }
        }
        (c, s)
    }

    fn ours(cert: &DtlsCert) -> Box<dyn DtlsInstance> {
        OpensslDtls
            .new_dtls(cert, Instant::now(), DtlsVersion::Dtls12, Some(1150))
            .unwrap()
    }

    fn dimpl(cert: &DtlsCert) -> Box<dyn DtlsInstance> {
        str0m::crypto::from_feature_flags()
            .dtls_provider
            .new_dtls(cert, Instant::now(), DtlsVersion::Dtls12, Some(1150))
            .unwrap()
    }

    /// Issue 10: GStreamer (RSA certificate) against a default server got
    /// "DTLS fails: dtls1_read_bytes: sslv3 alert handshake failure".
    #[test]
    fn an_rsa_client_certificate_is_accepted() {
        let client_cert = rsa_cert();
        let (mut client, mut server) = (ours(&client_cert), ours(&ecdsa_cert()));
        let (c, s) = handshake(client.as_mut(), server.as_mut());
        assert!(c.connected && s.connected, "handshake did not complete");
        assert_eq!(s.peer_cert.as_deref(), Some(&client_cert.certificate[..]));
        let (ck, cp) = c.keys.unwrap();
        let (sk, sp) = s.keys.unwrap();
        assert_eq!((ck, cp), (sk, sp), "both ends derive the same SRTP keys");
        assert_eq!(sp, SrtpProfile::AEAD_AES_128_GCM);
    }

    /// The same failure with str0m's own DTLS, which this crate replaces on
    /// the server: if dimpl ever takes RSA, this says so.
    #[test]
    fn str0m_own_dtls_refuses_an_rsa_client() {
        let (mut client, mut server) = (ours(&rsa_cert()), dimpl(&ecdsa_cert()));
        let (c, s) = handshake(client.as_mut(), server.as_mut());
        assert!(!(c.connected && s.connected));
    }

    /// str0m clients (our load client, tests) keep their DTLS: dimpl as the
    /// client against OpenSSL as the server, then application data (SCTP)
    /// both ways.
    #[test]
    fn a_dimpl_client_connects_and_exchanges_data() {
        let (mut client, mut server) = (dimpl(&ecdsa_cert()), ours(&ecdsa_cert()));
        let (mut c, mut s) = handshake(client.as_mut(), server.as_mut());
        assert!(c.connected && s.connected, "handshake did not complete");
        assert_eq!(c.keys.as_ref().map(|k| &k.0), s.keys.as_ref().map(|k| &k.0));
        assert_eq!(server.send_application_data(b"from server").unwrap(), 11);
        for p in poll(server.as_mut(), &mut s) {
            client.handle_packet(&p).unwrap();
        }
        assert_eq!(client.send_application_data(b"from client").unwrap(), 11);
        for p in poll(client.as_mut(), &mut c) {
            server.handle_packet(&p).unwrap();
        }
        poll(server.as_mut(), &mut s);
        assert_eq!(c.data, vec![b"from server".to_vec()]);
        assert_eq!(s.data, vec![b"from client".to_vec()]);
    }

    /// Our server against our client with the roles swapped (the peer made
    /// us the DTLS client).
    #[test]
    fn as_the_client_against_an_rsa_server() {
        let (mut client, mut server) = (ours(&ecdsa_cert()), ours(&rsa_cert()));
        let (c, s) = handshake(client.as_mut(), server.as_mut());
        assert!(c.connected && s.connected);
    }

    /// A buffer too small for the next record: asked for a larger one, the
    /// record kept.
    #[test]
    fn a_small_buffer_keeps_the_record() {
        let mut client = ours(&ecdsa_cert());
        let mut server = ours(&ecdsa_cert());
        let now = Instant::now();
        init(client.as_mut(), true, now);
        first_timers([client.as_mut(), server.as_mut()], now);
        let mut small = [0u8; 8];
        let needed = match client.poll_output(&mut small) {
            DtlsOutput::BufferTooSmall { needed } => needed,
            other => panic!("expected BufferTooSmall, got {other:?}"),
        };
        let mut big = vec![0u8; needed];
        match client.poll_output(&mut big) {
            DtlsOutput::Packet(p) => assert_eq!(p.len(), needed),
            other => panic!("expected the ClientHello, got {other:?}"),
        }
    }

    /// Garbage instead of a ClientHello: an error, no panic, nothing queued
    /// without bound.
    #[test]
    fn garbage_is_refused() {
        let mut server = ours(&ecdsa_cert());
        init(server.as_mut(), false, Instant::now());
        let mut seen = Seen::default();
        for i in 0..100u8 {
            let _ = server.handle_packet(&[22, 0xfe, 0xfd, i, 1, 2, 3]);
            let _ = server.handle_packet(&vec![i; 3000]);
            poll(server.as_mut(), &mut seen);
        }
        assert!(!seen.connected);
    }

    /// What str0m does with a session where the `Rtc` is built (corelay's
    /// control thread: build, answer, poll to the first timeout, twice)
    /// makes no OpenSSL object; the shard's first datagram or timer does.
    #[test]
    fn str0m_s_setup_calls_make_no_openssl_session() {
        let cert = ecdsa_cert();
        let now = Instant::now();
        let mut buf = vec![0u8; 2048];
        let mut unmade = |active: bool| {
            let mut side = Session::new(cert.clone(), Some(1150), now);
            init(&mut side, active, now);
            for _ in 0..2 {
                // str0m's poll fires a DTLS timer due at its last instant.
                match side.poll_output(&mut buf) {
                    DtlsOutput::Timeout(due) if due <= now => side.handle_timeout(now).unwrap(),
                    DtlsOutput::Timeout(_) => {}
                    other => panic!("active {active}: unexpected {other:?}"),
                }
            }
            assert!(
                matches!(side.state, State::Unmade(..)),
                "active {active}: made at setup: {side:?}"
            );
            side
        };
        let (mut client, mut server) = (unmade(true), unmade(false));
        // The client begins at its first later timer; the server at its
        // first datagram.
        client.handle_timeout(now + START_DELAY).unwrap();
        assert!(matches!(client.state, State::Handshaking(_)), "{client:?}");
        let hello = poll(&mut client, &mut Seen::default());
        assert!(!hello.is_empty(), "a ClientHello");
        for p in hello {
            server.handle_packet(&p).unwrap();
        }
        assert!(matches!(server.state, State::Handshaking(_)), "{server:?}");
        assert!(!poll(&mut server, &mut Seen::default()).is_empty());
    }

    /// A handshake whose server flight is lost is retransmitted on
    /// OpenSSL's timer (about a second).
    #[test]
    fn a_lost_flight_is_retransmitted() {
        let (mut client, mut server) = (ours(&rsa_cert()), ours(&ecdsa_cert()));
        let now = Instant::now();
        init(client.as_mut(), true, now);
        init(server.as_mut(), false, now);
        first_timers([client.as_mut(), server.as_mut()], now);
        let (mut c, mut s) = (Seen::default(), Seen::default());
        for p in poll(client.as_mut(), &mut c) {
            server.handle_packet(&p).unwrap();
        }
        // The server's flight is lost on the way.
        assert!(!poll(server.as_mut(), &mut s).is_empty());
        std::thread::sleep(Duration::from_millis(1100));
        client.handle_timeout(Instant::now()).unwrap();
        let again = poll(client.as_mut(), &mut c);
        assert!(!again.is_empty(), "the client retransmits its flight");
        let (c2, s2) = {
            for p in again {
                server.handle_packet(&p).unwrap();
            }
            for _ in 0..10 {
                for p in poll(server.as_mut(), &mut s) {
                    client.handle_packet(&p).unwrap();
                }
                for p in poll(client.as_mut(), &mut c) {
                    server.handle_packet(&p).unwrap();
                }
            }
            (c.connected, s.connected)
        };
        assert!(c2 && s2);
    }
}
