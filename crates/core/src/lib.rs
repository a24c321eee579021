//! corelay-core: the sans-I/O heart of the SFU.
//!
//! Owns participants (one str0m [`Rtc`](str0m::Rtc) each, RTP mode), rooms as one
//! shard sees them, forwarding decisions, SSRC/sequence/timestamp rewriting, slot
//! assignment, keyframe requests, and timers as values; and the room
//! [`directory`] (placement, admission, rosters) that the server's control
//! thread and the simulator's control plane both keep.
//!
//! Must not: read a clock (every entry point takes `now`), touch a socket, spawn a
//! thread or lock anything. The shard (server crate) drives an [`engine::Engine`]
//! the way str0m itself is driven: feed input, then collect output.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable,
        clippy::todo
    )
)]

pub mod codec;
pub mod diagnosis;
pub mod directory;
pub mod engine;
pub mod events;
pub mod faults;
pub mod guard;
pub mod ids;
pub mod lanes;
pub mod media;
pub mod metrics;
pub mod offer;
pub mod room;
pub mod rtp;
pub mod svc;
pub mod wire;

pub use engine::{Engine, LeaveReason, Outputs, PeerMsg, ShardEvent};
pub use ids::{ParticipantId, RoomId, ShardId, TrackKey};
pub use lanes::{ControlOutbox, Lane};
pub use offer::{
    Accepted, DtlsIdentity, OfferError, OfferLimits, ParticipantLimits, RtcSettings, VideoCodec,
};
