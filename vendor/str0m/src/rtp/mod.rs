mod id;
pub(crate) use id::MidRid;
pub use id::{Mid, Pt, Rid, SeqNo, SessionId, Ssrc, TwccClusterId, TwccSeq};

mod seq_no_window;
pub(crate) use seq_no_window::SeqNoWindow;

mod ext;
pub use ext::{AbsCaptureTime, UserExtensionValues, VideoOrientation};
pub use ext::{Extension, ExtensionMap, ExtensionSerializer, ExtensionValues};

mod dir;
pub use dir::Direction;

mod mtime;
pub use mtime::Frequency;
pub use mtime::MediaTime;

mod header;
pub use header::RtpHeader;
pub(crate) use header::{extend_u7, extend_u8, extend_u15, extend_u32};
// corelay patch (PATCHES.md, 25): exported (str0m::rtp::extend_u16).
pub use header::extend_u16;

mod srtp;
// corelay patch (PATCHES.md, 12): public, for `Rtc::srtp_contexts`.
pub use srtp::SrtpContext;
pub(crate) use srtp::{SRTCP_OVERHEAD, SRTP_BLOCK_SIZE, SRTP_OVERHEAD};

mod rtcp;
pub use rtcp::*;

pub use str0m_proto::{Bitrate, DataSize};

// Max in the RFC 3550 is 255 bytes, we limit it to be modulus 16 for SRTP and to match libWebRTC
pub const MAX_BLANK_PADDING_PAYLOAD_SIZE: usize = 240;

/// Errors that can arise in RTP.
mod error;
pub use error::RtpError;
