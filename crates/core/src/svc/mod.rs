//! Scalable video (SVC) as the SFU reads it, without decoding anything:
//! which spatial and temporal layer a packet carries, where layer frames
//! start and end, and where a subscriber may start taking a layer.
//!
//! Two sources of that knowledge, one answer ([`SvcPacket`]):
//! - [`vp9`]: the VP9 RTP payload descriptor (RFC 9628), read from the
//!   payload itself;
//! - [`dd`]: the dependency descriptor RTP header extension (AV1 RTP
//!   specification, appendix A), read from the header with the template
//!   structure the stream last announced. Chromium sends it with AV1, and
//!   with VP9 when asked; where both exist the descriptor wins.
//!
//! Owns: parsing and the per-stream structure state. Must not: decide what a
//! subscriber gets (that is the engine's slot), allocate per packet beyond
//! what a descriptor's structure needs, or trust a single byte: every read
//! is bounds-checked and a malformed descriptor is an error, never a guess.

pub mod dd;
pub mod vp9;

use str0m::format::Codec;

/// What the SFU needs from one packet of a scalable stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SvcPacket {
    /// Spatial layer id (0 = lowest resolution).
    pub spatial: u8,
    /// Temporal layer id (0 = base frame rate).
    pub temporal: u8,
    /// The first packet of this layer frame (VP9 `B`, DD `start_of_frame`).
    pub frame_start: bool,
    /// The last packet of this layer frame (VP9 `E`, DD `end_of_frame`).
    pub frame_end: bool,
    /// The first packet of a picture a decoder can start from with nothing
    /// before it (a keyframe's lowest spatial layer).
    pub keyframe: bool,
    /// A subscriber may start taking spatial layer `spatial` at this layer
    /// frame: it references no earlier picture of its own layer, only lower
    /// layers of the same picture (VP9 `P` clear; DD: the frame's decode
    /// target indication for its layer is "switch"). Always true with
    /// `keyframe`.
    pub switch_up: bool,
    /// How many spatial layers the stream announces, when this packet
    /// carries the announcement (VP9 scalability structure, DD template
    /// structure); `None` otherwise.
    pub spatial_layers: Option<u8>,
}

/// The layers of one video packet of `codec`, from its dependency
/// descriptor `dd` (read with its stream's `reader`, created at the first)
/// when it has one, else from VP9's payload descriptor; `Ok(None)` for a
/// packet of a codec without layers, or a VP9 payload whose descriptor does
/// not read (its keyframe test fails the same way, so it starts nothing). A
/// dependency descriptor that does not read is an error: the caller drops
/// the packet (what it would forward, it could not tell).
pub fn read(
    codec: Codec,
    payload: &[u8],
    dd: Option<&[u8]>,
    reader: &mut Option<Box<dd::DdReader>>,
) -> Result<Option<SvcPacket>, dd::DdError> {
    if let Some(ext) = dd
        && matches!(codec, Codec::Av1 | Codec::Vp9)
    {
        return reader
            .get_or_insert_default()
            .read(ext)
            .map(|f| Some(f.svc()));
    }
    if codec == Codec::Vp9 {
        return Ok(vp9::parse(payload).ok().map(|d| d.svc()));
    }
    Ok(None)
}
