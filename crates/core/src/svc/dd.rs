//! The dependency descriptor RTP header extension (AV1 RTP specification,
//! appendix A; URI [`DD_URI`]), as an SFU's packet path reads and writes it.
//!
//! Owns: the descriptor's bit syntax (mandatory fields, extended fields, the
//! template dependency structure, the frame dependency definition), the
//! per-published-stream state it needs ([`DdReader`]: the latest structure
//! and active decode targets), the mapping of a descriptor to the engine's
//! [`SvcPacket`], re-serialisation of a packet's descriptor with a structure
//! attached ([`write_with_structure`]) or a new active decode target mask
//! ([`write_active_decode_targets`]), and the str0m user extension that
//! carries the raw bytes between str0m and the engine ([`DdExtension`],
//! [`DdRaw`]).
//!
//! Must not: decide which layers a subscriber gets, keep per-subscriber
//! state (the engine's slot does both), allocate per packet (only a packet
//! that carries a template structure allocates, once, for its templates),
//! or trust a count: every read is bounds-checked, every count is capped
//! ([`MAX_TEMPLATES`], [`MAX_DECODE_TARGETS`], [`MAX_CHAINS`],
//! [`MAX_FDIFFS`], [`MAX_SPATIAL_LAYERS`], [`MAX_TEMPORAL_LAYERS`]) and a
//! descriptor that breaks a cap or refers to a template the structure lacks
//! is an error.
//!
//! Switch points: a `Switch` DTI ([`DdFrame::is_switch`]) lets a decoder
//! start a decode target only if it holds the frames of the chain that
//! protects it, which a subscriber an SFU fed lower layers lacks (the
//! spec's L3T3 marks every spatial 1 T0 frame so). [`DdFrame::svc`] asks
//! in addition that the frame reference only lower layers of its own
//! picture, as [`SvcPacket::switch_up`] means.

use std::fmt;
use std::sync::Arc;

use str0m::rtp::{Extension, ExtensionSerializer, ExtensionValues};

use super::SvcPacket;

/// The extension's URI in SDP (`a=extmap`).
pub const DD_URI: &str =
    "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension";

/// Templates in one structure: `frame_dependency_template_id` is 6 bits.
pub const MAX_TEMPLATES: usize = 64;
/// Decode targets: `dt_cnt_minus_one` is 5 bits.
pub const MAX_DECODE_TARGETS: usize = 32;
/// Chains: at most one per decode target.
pub const MAX_CHAINS: usize = 32;
/// Frame differences of one template or one frame. The syntax has no
/// bound; libwebrtc's encoders use at most a handful.
pub const MAX_FDIFFS: usize = 15;
/// Spatial layers (`render_resolutions` and the SVC modes libwebrtc knows).
pub const MAX_SPATIAL_LAYERS: usize = 4;
/// Temporal layers (libwebrtc's bound).
pub const MAX_TEMPORAL_LAYERS: usize = 8;
/// The longest descriptor an RTP header extension can carry (two-byte form).
pub const DD_MAX_LEN: usize = 255;

/// Why a descriptor was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdError {
    /// The bytes end before the syntax does.
    Truncated,
    /// No template structure has arrived yet (the mandatory fields read).
    NoStructure,
    /// The template id (after `template_id_offset`) names no template of the
    /// current structure.
    UnknownTemplate,
    /// More than [`MAX_TEMPLATES`] templates.
    TooManyTemplates,
    /// A spatial id of [`MAX_SPATIAL_LAYERS`] or a temporal id of
    /// [`MAX_TEMPORAL_LAYERS`] or more.
    TooManyLayers,
    /// More than [`MAX_FDIFFS`] frame differences in a template or a frame.
    TooManyFdiffs,
}

impl fmt::Display for DdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DdError::Truncated => "dependency descriptor truncated",
            DdError::NoStructure => "dependency descriptor before any template structure",
            DdError::UnknownTemplate => {
                "dependency descriptor names a template the structure lacks"
            }
            DdError::TooManyTemplates => "dependency descriptor structure has too many templates",
            DdError::TooManyLayers => "dependency descriptor structure has too many layers",
            DdError::TooManyFdiffs => "dependency descriptor has too many frame differences",
        })
    }
}

impl std::error::Error for DdError {}

// ---------------------------------------------------------------------------
// Bits.

/// Reads bits most significant first, bounds-checked.
struct BitReader<'a> {
    buf: &'a [u8],
    /// Position in bits.
    pos: usize,
}

impl<'a> BitReader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        BitReader { buf, pos: 0 }
    }

    fn bit(&mut self) -> Result<bool, DdError> {
        let byte = self.buf.get(self.pos / 8).ok_or(DdError::Truncated)?;
        let bit = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Ok(bit == 1)
    }

    /// `f(n)`, n at most 32.
    fn bits(&mut self, n: u32) -> Result<u32, DdError> {
        debug_assert!(n <= 32);
        let mut v: u64 = 0;
        for _ in 0..n {
            v = (v << 1) | u64::from(self.bit()?);
        }
        Ok(v as u32)
    }

    /// `ns(n)`: a value in `0..n` in as few bits as the spec's
    /// non-symmetric code takes. `n` at least 1.
    fn ns(&mut self, n: u32) -> Result<u32, DdError> {
        let w = ns_width(n);
        let m = (1u32 << w) - n;
        let v = self.bits(w - 1)?;
        if v < m {
            return Ok(v);
        }
        let extra = u32::from(self.bit()?);
        Ok((v << 1) - m + extra)
    }
}

/// `FloorLog2(n) + 1`, the width `ns(n)` is built on.
fn ns_width(n: u32) -> u32 {
    32 - n.leading_zeros()
}

/// Writes bits most significant first into a bounded buffer; every byte it
/// starts is cleared first, so the padding is zero.
struct BitWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> BitWriter<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        BitWriter { buf, pos: 0 }
    }

    fn bit(&mut self, b: bool) -> Option<()> {
        let byte = self.buf.get_mut(self.pos / 8)?;
        let shift = 7 - self.pos % 8;
        if shift == 7 {
            *byte = 0;
        }
        if b {
            *byte |= 1 << shift;
        }
        self.pos += 1;
        Some(())
    }

    fn bits(&mut self, v: u32, n: u32) -> Option<()> {
        for i in (0..n).rev() {
            self.bit((v >> i) & 1 == 1)?;
        }
        Some(())
    }

    fn ns(&mut self, v: u32, n: u32) -> Option<()> {
        if v >= n {
            return None;
        }
        let w = ns_width(n);
        let m = (1u32 << w) - n;
        if v < m {
            self.bits(v, w - 1)
        } else {
            let x = v + m;
            self.bits(x >> 1, w - 1)?;
            self.bit(x & 1 == 1)
        }
    }

    fn len(&self) -> usize {
        self.pos.div_ceil(8)
    }
}

// ---------------------------------------------------------------------------
// The structure.

/// A decode target indication (table A.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dti {
    /// The frame is not in the decode target.
    #[default]
    NotPresent = 0,
    /// In the decode target, but no later frame of it depends on this one.
    Discardable = 1,
    /// A decoder of the decode target can start here.
    Switch = 2,
    /// In the decode target, and needed by later frames of it.
    Required = 3,
}

impl Dti {
    fn from_bits(b: u32) -> Dti {
        match b & 3 {
            0 => Dti::NotPresent,
            1 => Dti::Discardable,
            2 => Dti::Switch,
            _ => Dti::Required,
        }
    }
}

/// One frame dependency template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    spatial: u8,
    temporal: u8,
    dt_cnt: u8,
    dtis: [Dti; MAX_DECODE_TARGETS],
    fdiff_cnt: u8,
    /// 1..=16 each.
    fdiffs: [u8; MAX_FDIFFS],
    chain_cnt: u8,
    /// 0..=15 each.
    chain_fdiffs: [u8; MAX_CHAINS],
}

impl Template {
    /// A template for a structure built by hand (tests, tools): the layer,
    /// one DTI per decode target, frame differences (1..=16) and one chain
    /// frame difference (0..=15) per chain. `None` when a count or value is
    /// out of range.
    pub fn new(
        spatial: u8,
        temporal: u8,
        dtis: &[Dti],
        fdiffs: &[u8],
        chain_fdiffs: &[u8],
    ) -> Option<Template> {
        if usize::from(spatial) >= MAX_SPATIAL_LAYERS
            || usize::from(temporal) >= MAX_TEMPORAL_LAYERS
            || dtis.is_empty()
            || dtis.len() > MAX_DECODE_TARGETS
            || fdiffs.len() > MAX_FDIFFS
            || chain_fdiffs.len() > MAX_CHAINS
            || fdiffs.iter().any(|&d| !(1..=16).contains(&d))
            || chain_fdiffs.iter().any(|&d| d > 15)
        {
            return None;
        }
        let mut t = Template {
            spatial,
            temporal,
            dt_cnt: dtis.len() as u8,
            dtis: [Dti::NotPresent; MAX_DECODE_TARGETS],
            fdiff_cnt: fdiffs.len() as u8,
            fdiffs: [0; MAX_FDIFFS],
            chain_cnt: chain_fdiffs.len() as u8,
            chain_fdiffs: [0; MAX_CHAINS],
        };
        t.dtis.get_mut(..dtis.len())?.copy_from_slice(dtis);
        t.fdiffs.get_mut(..fdiffs.len())?.copy_from_slice(fdiffs);
        t.chain_fdiffs
            .get_mut(..chain_fdiffs.len())?
            .copy_from_slice(chain_fdiffs);
        Some(t)
    }

    /// Spatial id.
    pub fn spatial(&self) -> u8 {
        self.spatial
    }

    /// Temporal id.
    pub fn temporal(&self) -> u8 {
        self.temporal
    }

    /// One DTI per decode target.
    pub fn dtis(&self) -> &[Dti] {
        self.dtis.get(..usize::from(self.dt_cnt)).unwrap_or(&[])
    }

    /// Frame differences, 1..=16 each.
    pub fn fdiffs(&self) -> &[u8] {
        self.fdiffs
            .get(..usize::from(self.fdiff_cnt))
            .unwrap_or(&[])
    }

    /// One frame difference per chain, 0..=15 each.
    pub fn chain_fdiffs(&self) -> &[u8] {
        self.chain_fdiffs
            .get(..usize::from(self.chain_cnt))
            .unwrap_or(&[])
    }
}

/// A template dependency structure: what a stream announces at keyframes
/// and every later descriptor refers to by template id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Structure {
    template_id_offset: u8,
    dt_cnt: u8,
    chain_cnt: u8,
    templates: Vec<Template>,
    protected_by: [u8; MAX_DECODE_TARGETS],
    /// Derived (`decode_target_layers()`): each decode target's highest
    /// spatial and temporal id.
    dt_layers: [(u8, u8); MAX_DECODE_TARGETS],
    /// `(width, height)` per spatial layer up to `max_spatial`.
    resolutions: Option<[(u16, u16); MAX_SPATIAL_LAYERS]>,
    max_spatial: u8,
    max_temporal: u8,
}

impl Structure {
    /// A structure built by hand (tests, tools). `templates` in the order
    /// the syntax can express: the first is spatial 0 temporal 0, and each
    /// next one has the same layer, the next temporal id of the same
    /// spatial layer, or temporal 0 of the next spatial layer. Every
    /// template has `protected_by.len()` decode targets (at least one) and
    /// the same number of chain frame differences; `protected_by` names a
    /// chain per decode target (empty when there are no chains: then the
    /// templates carry none), `resolutions` one `(width, height)` (each at
    /// least 1) per spatial layer.
    pub fn new(
        template_id_offset: u8,
        templates: Vec<Template>,
        dt_cnt: usize,
        chain_cnt: usize,
        protected_by: &[u8],
        resolutions: Option<&[(u16, u16)]>,
    ) -> Option<Structure> {
        if template_id_offset >= 64
            || templates.is_empty()
            || templates.len() > MAX_TEMPLATES
            || dt_cnt == 0
            || dt_cnt > MAX_DECODE_TARGETS
            || chain_cnt > dt_cnt
            || protected_by.len() != if chain_cnt == 0 { 0 } else { dt_cnt }
            || protected_by.iter().any(|&c| usize::from(c) >= chain_cnt)
        {
            return None;
        }
        let mut prev: Option<(u8, u8)> = None;
        for t in &templates {
            if usize::from(t.dt_cnt) != dt_cnt || usize::from(t.chain_cnt) != chain_cnt {
                return None;
            }
            let here = (t.spatial, t.temporal);
            let ok = match prev {
                None => here == (0, 0),
                Some((s, tid)) => here == (s, tid) || here == (s, tid + 1) || here == (s + 1, 0),
            };
            if !ok {
                return None;
            }
            prev = Some(here);
        }
        let mut pb = [0u8; MAX_DECODE_TARGETS];
        pb.get_mut(..protected_by.len())?
            .copy_from_slice(protected_by);
        let max_spatial = templates.iter().map(|t| t.spatial).max().unwrap_or(0);
        let res = match resolutions {
            None => None,
            Some(r) => {
                if r.len() != usize::from(max_spatial) + 1
                    || r.iter().any(|&(w, h)| w == 0 || h == 0)
                {
                    return None;
                }
                let mut a = [(0u16, 0u16); MAX_SPATIAL_LAYERS];
                a.get_mut(..r.len())?.copy_from_slice(r);
                Some(a)
            }
        };
        Some(Structure::finish(
            template_id_offset,
            dt_cnt as u8,
            chain_cnt as u8,
            templates,
            pb,
            res,
        ))
    }

    /// Derives the per-decode-target layers and the maxima.
    fn finish(
        template_id_offset: u8,
        dt_cnt: u8,
        chain_cnt: u8,
        templates: Vec<Template>,
        protected_by: [u8; MAX_DECODE_TARGETS],
        resolutions: Option<[(u16, u16); MAX_SPATIAL_LAYERS]>,
    ) -> Structure {
        let mut dt_layers = [(0u8, 0u8); MAX_DECODE_TARGETS];
        for (dt, layers) in dt_layers.iter_mut().enumerate().take(usize::from(dt_cnt)) {
            for t in &templates {
                if t.dtis.get(dt).is_some_and(|&d| d != Dti::NotPresent) {
                    layers.0 = layers.0.max(t.spatial);
                    layers.1 = layers.1.max(t.temporal);
                }
            }
        }
        let max_spatial = templates.iter().map(|t| t.spatial).max().unwrap_or(0);
        let max_temporal = templates.iter().map(|t| t.temporal).max().unwrap_or(0);
        Structure {
            template_id_offset,
            dt_cnt,
            chain_cnt,
            templates,
            protected_by,
            dt_layers,
            resolutions,
            max_spatial,
            max_temporal,
        }
    }

    /// `template_id_offset`: template `i` has id `(i + offset) % 64`.
    pub fn template_id_offset(&self) -> u8 {
        self.template_id_offset
    }

    /// The templates, in order.
    pub fn templates(&self) -> &[Template] {
        &self.templates
    }

    /// How many decode targets (1..=32).
    pub fn decode_targets(&self) -> usize {
        usize::from(self.dt_cnt)
    }

    /// How many chains (0..=decode targets).
    pub fn chains(&self) -> usize {
        usize::from(self.chain_cnt)
    }

    /// The chain that protects decode target `dt`; `None` without chains.
    pub fn protected_by(&self, dt: usize) -> Option<u8> {
        if self.chain_cnt == 0 || dt >= self.decode_targets() {
            return None;
        }
        self.protected_by.get(dt).copied()
    }

    /// Decode target `dt`'s highest `(spatial, temporal)`: the highest
    /// among the templates whose DTI for it is not `NotPresent`.
    pub fn decode_target_layers(&self, dt: usize) -> Option<(u8, u8)> {
        if dt >= self.decode_targets() {
            return None;
        }
        self.dt_layers.get(dt).copied()
    }

    /// The decode target a frame of `(spatial, temporal)` belongs to: the
    /// one whose highest layers are exactly those, or else the lowest one
    /// that covers them; `None` when none does.
    pub fn decode_target_for(&self, spatial: u8, temporal: u8) -> Option<usize> {
        let dts = self
            .dt_layers
            .iter()
            .take(self.decode_targets())
            .enumerate();
        if let Some((dt, _)) = dts.clone().find(|&(_, &l)| l == (spatial, temporal)) {
            return Some(dt);
        }
        dts.filter(|&(_, &(s, t))| s >= spatial && t >= temporal)
            .min_by_key(|&(_, &l)| l)
            .map(|(dt, _)| dt)
    }

    /// The highest spatial id among the templates.
    pub fn max_spatial(&self) -> u8 {
        self.max_spatial
    }

    /// The highest temporal id among the templates.
    pub fn max_temporal(&self) -> u8 {
        self.max_temporal
    }

    /// How many spatial layers the structure announces.
    pub fn spatial_layers(&self) -> u8 {
        self.max_spatial + 1
    }

    /// The `(width, height)` of spatial layer `spatial`, when the structure
    /// carries render resolutions.
    pub fn resolution(&self, spatial: u8) -> Option<(u16, u16)> {
        if spatial > self.max_spatial {
            return None;
        }
        self.resolutions?.get(usize::from(spatial)).copied()
    }

    /// The width of spatial layer `spatial`, when announced.
    pub fn width_of(&self, spatial: u8) -> Option<u16> {
        self.resolution(spatial).map(|(w, _)| w)
    }

    /// The height of spatial layer `spatial`, when announced.
    pub fn height_of(&self, spatial: u8) -> Option<u16> {
        self.resolution(spatial).map(|(_, h)| h)
    }

    /// Every decode target active.
    pub fn all_decode_targets(&self) -> u32 {
        all_mask(self.dt_cnt)
    }

    /// Template of index `(template_id - offset) % 64`.
    fn template_for_id(&self, template_id: u8) -> Result<(usize, &Template), DdError> {
        let idx = (usize::from(template_id) + 64 - usize::from(self.template_id_offset)) % 64;
        self.templates
            .get(idx)
            .map(|t| (idx, t))
            .ok_or(DdError::UnknownTemplate)
    }

    fn read(r: &mut BitReader<'_>) -> Result<Structure, DdError> {
        let template_id_offset = r.bits(6)? as u8;
        let dt_cnt = r.bits(5)? as u8 + 1;
        // template_layers()
        let mut layers = [(0u8, 0u8); MAX_TEMPLATES];
        let mut cnt = 0usize;
        let (mut spatial, mut temporal) = (0u8, 0u8);
        loop {
            *layers.get_mut(cnt).ok_or(DdError::TooManyTemplates)? = (spatial, temporal);
            cnt += 1;
            match r.bits(2)? {
                0 => {}
                1 => temporal += 1,
                2 => {
                    temporal = 0;
                    spatial += 1;
                }
                _ => break,
            }
            if usize::from(spatial) >= MAX_SPATIAL_LAYERS
                || usize::from(temporal) >= MAX_TEMPORAL_LAYERS
            {
                return Err(DdError::TooManyLayers);
            }
        }
        let mut templates = Vec::with_capacity(cnt);
        for &(spatial, temporal) in layers.iter().take(cnt) {
            templates.push(Template {
                spatial,
                temporal,
                dt_cnt,
                dtis: [Dti::NotPresent; MAX_DECODE_TARGETS],
                fdiff_cnt: 0,
                fdiffs: [0; MAX_FDIFFS],
                chain_cnt: 0,
                chain_fdiffs: [0; MAX_CHAINS],
            });
        }
        // template_dtis()
        for t in &mut templates {
            for d in t.dtis.iter_mut().take(usize::from(dt_cnt)) {
                *d = Dti::from_bits(r.bits(2)?);
            }
        }
        // template_fdiffs()
        for t in &mut templates {
            while r.bit()? {
                let slot = t
                    .fdiffs
                    .get_mut(usize::from(t.fdiff_cnt))
                    .ok_or(DdError::TooManyFdiffs)?;
                *slot = r.bits(4)? as u8 + 1;
                t.fdiff_cnt += 1;
            }
        }
        // template_chains()
        let chain_cnt = r.ns(u32::from(dt_cnt) + 1)? as u8;
        let mut protected_by = [0u8; MAX_DECODE_TARGETS];
        if chain_cnt > 0 {
            for p in protected_by.iter_mut().take(usize::from(dt_cnt)) {
                *p = r.ns(u32::from(chain_cnt))? as u8;
            }
            for t in &mut templates {
                t.chain_cnt = chain_cnt;
                for c in t.chain_fdiffs.iter_mut().take(usize::from(chain_cnt)) {
                    *c = r.bits(4)? as u8;
                }
            }
        }
        // decode_target_layers() is derived in `finish`.
        let max_spatial = usize::from(spatial);
        let resolutions = if r.bit()? {
            let mut a = [(0u16, 0u16); MAX_SPATIAL_LAYERS];
            for res in a.iter_mut().take(max_spatial + 1) {
                let w = r.bits(16)? as u16;
                let h = r.bits(16)? as u16;
                *res = (w.wrapping_add(1), h.wrapping_add(1));
            }
            Some(a)
        } else {
            None
        };
        // `spatial` is the last template's, the highest: templates only go
        // up in spatial id.
        Ok(Structure::finish(
            template_id_offset,
            dt_cnt,
            chain_cnt,
            templates,
            protected_by,
            resolutions,
        ))
    }

    fn write(&self, w: &mut BitWriter<'_>) -> Option<()> {
        w.bits(u32::from(self.template_id_offset), 6)?;
        w.bits(u32::from(self.dt_cnt) - 1, 5)?;
        let mut iter = self.templates.iter().peekable();
        while let Some(t) = iter.next() {
            let idc = match iter.peek() {
                None => 3,
                Some(n) if n.spatial == t.spatial && n.temporal == t.temporal => 0,
                Some(n) if n.spatial == t.spatial && n.temporal == t.temporal + 1 => 1,
                Some(n) if n.spatial == t.spatial + 1 && n.temporal == 0 => 2,
                Some(_) => return None,
            };
            w.bits(idc, 2)?;
        }
        for t in &self.templates {
            for d in t.dtis() {
                w.bits(*d as u32, 2)?;
            }
        }
        for t in &self.templates {
            for &d in t.fdiffs() {
                w.bit(true)?;
                w.bits(u32::from(d) - 1, 4)?;
            }
            w.bit(false)?;
        }
        w.ns(u32::from(self.chain_cnt), u32::from(self.dt_cnt) + 1)?;
        if self.chain_cnt > 0 {
            for &p in self.protected_by.iter().take(self.decode_targets()) {
                w.ns(u32::from(p), u32::from(self.chain_cnt))?;
            }
            for t in &self.templates {
                for &c in t.chain_fdiffs() {
                    w.bits(u32::from(c), 4)?;
                }
            }
        }
        match &self.resolutions {
            None => w.bit(false)?,
            Some(res) => {
                w.bit(true)?;
                for &(wd, h) in res.iter().take(usize::from(self.max_spatial) + 1) {
                    w.bits(u32::from(wd.wrapping_sub(1)), 16)?;
                    w.bits(u32::from(h.wrapping_sub(1)), 16)?;
                }
            }
        }
        Some(())
    }
}

fn all_mask(dt_cnt: u8) -> u32 {
    if dt_cnt >= 32 {
        u32::MAX
    } else {
        (1u32 << dt_cnt) - 1
    }
}

// ---------------------------------------------------------------------------
// Frames.

/// The mandatory fields, which read without a structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DdMandatory {
    /// First packet of the frame.
    pub start_of_frame: bool,
    /// Last packet of the frame.
    pub end_of_frame: bool,
    /// `frame_dependency_template_id` (0..64).
    pub template_id: u8,
    /// `frame_number`.
    pub frame_number: u16,
}

impl DdMandatory {
    /// The first three bytes of a descriptor.
    pub fn parse(ext: &[u8]) -> Result<DdMandatory, DdError> {
        let mut r = BitReader::new(ext);
        DdMandatory::read(&mut r)
    }

    fn read(r: &mut BitReader<'_>) -> Result<DdMandatory, DdError> {
        Ok(DdMandatory {
            start_of_frame: r.bit()?,
            end_of_frame: r.bit()?,
            template_id: r.bits(6)? as u8,
            frame_number: r.bits(16)? as u16,
        })
    }
}

/// One packet's descriptor, resolved against the structure in force.
/// Fixed-size: reading one allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdFrame {
    /// First packet of the frame.
    pub start_of_frame: bool,
    /// Last packet of the frame.
    pub end_of_frame: bool,
    /// `frame_dependency_template_id` as sent.
    pub template_id: u8,
    /// `frame_number`.
    pub frame_number: u16,
    /// The template's spatial id.
    pub spatial: u8,
    /// The template's temporal id.
    pub temporal: u8,
    /// This packet carried a template structure.
    pub structure_attached: bool,
    /// The active decode target bitmask, when this packet carried one.
    pub active_decode_targets: Option<u32>,
    template_index: u8,
    dt_cnt: u8,
    dtis: [Dti; MAX_DECODE_TARGETS],
    fdiff_cnt: u8,
    fdiffs: [u16; MAX_FDIFFS],
    chain_cnt: u8,
    chain_fdiffs: [u8; MAX_CHAINS],
    decode_target: Option<u8>,
    spatial_layers: Option<u8>,
}

impl DdFrame {
    /// The frame's DTI per decode target (custom or the template's).
    pub fn dtis(&self) -> &[Dti] {
        self.dtis.get(..usize::from(self.dt_cnt)).unwrap_or(&[])
    }

    /// The frame's DTI for decode target `dt`.
    pub fn dti(&self, dt: usize) -> Option<Dti> {
        self.dtis().get(dt).copied()
    }

    /// The frame's differences to the frames it references (custom or the
    /// template's), 1..=4096 each. Empty for a frame that references none.
    pub fn fdiffs(&self) -> &[u16] {
        self.fdiffs
            .get(..usize::from(self.fdiff_cnt))
            .unwrap_or(&[])
    }

    /// The frame's difference to the previous frame of each chain.
    pub fn chain_fdiffs(&self) -> &[u8] {
        self.chain_fdiffs
            .get(..usize::from(self.chain_cnt))
            .unwrap_or(&[])
    }

    /// The index of the frame's template in the structure.
    pub fn template_index(&self) -> usize {
        usize::from(self.template_index)
    }

    /// The decode target the frame's `(spatial, temporal)` belongs to
    /// ([`Structure::decode_target_for`]).
    pub fn decode_target(&self) -> Option<usize> {
        self.decode_target.map(usize::from)
    }

    /// The frame's DTI for its own decode target
    /// ([`DdFrame::decode_target`]) is `Switch`. In the descriptor's
    /// terms that is a switch point for a decoder that holds the frames of
    /// the chain protecting that target, which an SFU that forwarded only
    /// lower layers has not sent: the spec's L3T3 (A.6.3) marks every
    /// spatial 1 T0 frame so, though it references the previous one.
    pub fn is_switch(&self) -> bool {
        self.decode_target()
            .and_then(|dt| self.dti(dt))
            .is_some_and(|d| d == Dti::Switch)
    }

    /// What the engine needs. Keyframe: the packet carries the structure,
    /// starts the frame, references nothing and is spatial 0. Switch-up:
    /// a keyframe, or [`DdFrame::is_switch`] with every frame difference
    /// at most the spatial id, so that it references only lower layers of
    /// its own picture (frame numbers run up the layers of one picture),
    /// as [`SvcPacket::switch_up`] means. The spatial layer count when the
    /// structure came with this packet.
    pub fn svc(&self) -> SvcPacket {
        let keyframe = self.structure_attached
            && self.start_of_frame
            && self.fdiff_cnt == 0
            && self.spatial == 0;
        let switch =
            self.is_switch() && self.fdiffs().iter().all(|&d| d <= u16::from(self.spatial));
        SvcPacket {
            spatial: self.spatial,
            temporal: self.temporal,
            frame_start: self.start_of_frame,
            frame_end: self.end_of_frame,
            keyframe,
            switch_up: keyframe || switch,
            spatial_layers: self.spatial_layers,
        }
    }
}

/// Reads a descriptor against `current` (or the structure it carries).
/// Returns the frame and the structure it carried, if any.
fn parse(ext: &[u8], current: Option<&Structure>) -> Result<(DdFrame, Option<Structure>), DdError> {
    let mut r = BitReader::new(ext);
    let m = DdMandatory::read(&mut r)?;
    let mut carried = None;
    let mut active = None;
    let (mut custom_dtis, mut custom_fdiffs, mut custom_chains) = (false, false, false);
    if ext.len() > 3 {
        let structure_present = r.bit()?;
        let active_present = r.bit()?;
        custom_dtis = r.bit()?;
        custom_fdiffs = r.bit()?;
        custom_chains = r.bit()?;
        if structure_present {
            carried = Some(Structure::read(&mut r)?);
        }
        if active_present {
            let s = carried.as_ref().or(current).ok_or(DdError::NoStructure)?;
            active = Some(r.bits(u32::from(s.dt_cnt))?);
        }
    }
    let s = carried.as_ref().or(current).ok_or(DdError::NoStructure)?;
    let (idx, t) = s.template_for_id(m.template_id)?;
    let mut f = DdFrame {
        start_of_frame: m.start_of_frame,
        end_of_frame: m.end_of_frame,
        template_id: m.template_id,
        frame_number: m.frame_number,
        spatial: t.spatial,
        temporal: t.temporal,
        structure_attached: carried.is_some(),
        active_decode_targets: active,
        template_index: idx as u8,
        dt_cnt: s.dt_cnt,
        dtis: t.dtis,
        fdiff_cnt: 0,
        fdiffs: [0; MAX_FDIFFS],
        chain_cnt: s.chain_cnt,
        chain_fdiffs: t.chain_fdiffs,
        decode_target: s.decode_target_for(t.spatial, t.temporal).map(|d| d as u8),
        spatial_layers: carried.as_ref().map(Structure::spatial_layers),
    };
    if custom_dtis {
        for d in f.dtis.iter_mut().take(usize::from(s.dt_cnt)) {
            *d = Dti::from_bits(r.bits(2)?);
        }
    }
    if custom_fdiffs {
        loop {
            let size = r.bits(2)?;
            if size == 0 {
                break;
            }
            let slot = f
                .fdiffs
                .get_mut(usize::from(f.fdiff_cnt))
                .ok_or(DdError::TooManyFdiffs)?;
            *slot = r.bits(4 * size)? as u16 + 1;
            f.fdiff_cnt += 1;
        }
    } else {
        for (dst, &src) in f.fdiffs.iter_mut().zip(t.fdiffs()) {
            *dst = u16::from(src);
        }
        f.fdiff_cnt = t.fdiff_cnt;
    }
    if custom_chains {
        for c in f.chain_fdiffs.iter_mut().take(usize::from(s.chain_cnt)) {
            *c = r.bits(8)? as u8;
        }
    }
    Ok((f, carried))
}

/// Per published stream: the structure in force and the active decode
/// targets, as the stream's descriptors set them.
#[derive(Clone, Debug, Default)]
pub struct DdReader {
    structure: Option<Arc<Structure>>,
    active: u32,
}

impl DdReader {
    /// A reader before any structure.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads one packet's descriptor. A structure it carries replaces the
    /// current one (the same `Arc` stays when the structure is unchanged)
    /// and makes every decode target active; an active decode target mask
    /// it carries replaces the current one. State changes only when the
    /// whole descriptor reads.
    pub fn read(&mut self, ext: &[u8]) -> Result<DdFrame, DdError> {
        let (frame, carried) = parse(ext, self.structure.as_deref())?;
        if let Some(s) = carried {
            self.active = s.all_decode_targets();
            if self.structure.as_deref() != Some(&s) {
                self.structure = Some(Arc::new(s));
            }
        }
        if let Some(a) = frame.active_decode_targets {
            self.active = a;
        }
        Ok(frame)
    }

    /// The structure in force.
    pub fn structure(&self) -> Option<&Arc<Structure>> {
        self.structure.as_ref()
    }

    /// The active decode target mask in force (bit `i` for decode target
    /// `i`); 0 before any structure.
    pub fn active_decode_targets(&self) -> u32 {
        self.active
    }

    /// Forgets the structure (a new publisher on the same stream).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

// ---------------------------------------------------------------------------
// Writing.

/// Writes `frame` as a descriptor against `structure` (the one it was read
/// with): DTIs, frame differences and chain differences that differ from
/// the template's are written as custom; `attach` adds the structure, and
/// `active_decode_targets` the mask (masked to the structure's decode
/// targets). Returns the length, `None` when `out` (or [`DD_MAX_LEN`]) is
/// too small or the frame does not fit the structure.
pub fn write_frame(
    frame: &DdFrame,
    structure: &Structure,
    attach: bool,
    active_decode_targets: Option<u32>,
    out: &mut [u8],
) -> Option<usize> {
    let t = structure.templates.get(frame.template_index())?;
    if frame.dt_cnt != structure.dt_cnt || frame.chain_cnt != structure.chain_cnt {
        return None;
    }
    let template_id = (frame.template_index + structure.template_id_offset) % 64;
    let custom_dtis = frame.dtis() != t.dtis();
    let custom_fdiffs = frame.fdiff_cnt != t.fdiff_cnt
        || frame
            .fdiffs()
            .iter()
            .zip(t.fdiffs())
            .any(|(&a, &b)| a != u16::from(b));
    let custom_chains = frame.chain_fdiffs() != t.chain_fdiffs();
    let extended =
        attach || active_decode_targets.is_some() || custom_dtis || custom_fdiffs || custom_chains;

    let limit = out.len().min(DD_MAX_LEN);
    let mut w = BitWriter::new(out.get_mut(..limit)?);
    w.bit(frame.start_of_frame)?;
    w.bit(frame.end_of_frame)?;
    w.bits(u32::from(template_id), 6)?;
    w.bits(u32::from(frame.frame_number), 16)?;
    if extended {
        w.bit(attach)?;
        w.bit(active_decode_targets.is_some())?;
        w.bit(custom_dtis)?;
        w.bit(custom_fdiffs)?;
        w.bit(custom_chains)?;
        if attach {
            structure.write(&mut w)?;
        }
        if let Some(a) = active_decode_targets {
            w.bits(
                a & structure.all_decode_targets(),
                u32::from(structure.dt_cnt),
            )?;
        }
        if custom_dtis {
            for d in frame.dtis() {
                w.bits(*d as u32, 2)?;
            }
        }
        if custom_fdiffs {
            for &d in frame.fdiffs() {
                let v = u32::from(d).checked_sub(1)?;
                let size = match v {
                    0..=0xf => 1,
                    0x10..=0xff => 2,
                    0x100..=0xfff => 3,
                    _ => return None,
                };
                w.bits(size, 2)?;
                w.bits(v, 4 * size)?;
            }
            w.bits(0, 2)?;
        }
        if custom_chains {
            for &c in frame.chain_fdiffs() {
                w.bits(u32::from(c), 8)?;
            }
        }
    }
    Some(w.len())
}

/// Re-serialises a packet's descriptor `ext` (read against `structure`)
/// with `structure` attached, for a subscriber's first packet of a stream
/// it did not follow before. `active_decode_targets`: the mask to announce
/// (an attached structure resets the receiver's to all); `None` keeps the
/// packet's own, if any. A descriptor that carries a structure already is
/// copied as is, unless a mask is asked for. Returns the length written to
/// `out`.
pub fn write_with_structure(
    ext: &[u8],
    structure: &Structure,
    active_decode_targets: Option<u32>,
    out: &mut [u8],
) -> Option<usize> {
    let (frame, carried) = parse(ext, Some(structure)).ok()?;
    if let Some(own) = carried {
        if active_decode_targets.is_none() {
            let dst = out.get_mut(..ext.len())?;
            dst.copy_from_slice(ext);
            return Some(ext.len());
        }
        let active = active_decode_targets.or(frame.active_decode_targets);
        return write_frame(&frame, &own, true, active, out);
    }
    let active = active_decode_targets.or(frame.active_decode_targets);
    write_frame(&frame, structure, true, active, out)
}

/// Re-serialises a packet's descriptor `ext` (read against `structure`)
/// with the active decode target mask `mask`, keeping a structure it
/// carries. Returns the length written to `out`.
pub fn write_active_decode_targets(
    ext: &[u8],
    structure: &Structure,
    mask: u32,
    out: &mut [u8],
) -> Option<usize> {
    let (frame, carried) = parse(ext, Some(structure)).ok()?;
    match carried {
        Some(own) => write_frame(&frame, &own, true, Some(mask), out),
        None => write_frame(&frame, structure, false, Some(mask), out),
    }
}

// ---------------------------------------------------------------------------
// The str0m extension.

/// A descriptor's raw bytes as str0m parsed them into (or writes them from)
/// [`ExtensionValues::user_values`]. Inline: str0m boxes each user value in
/// an `Arc` of its own, so one allocation per packet, and
/// `user_values.get_arc` / `set_arc` pass it on without copying.
#[derive(Clone)]
pub struct DdRaw {
    len: u8,
    bytes: [u8; DD_MAX_LEN],
}

impl DdRaw {
    /// `None` when longer than [`DD_MAX_LEN`].
    pub fn new(b: &[u8]) -> Option<DdRaw> {
        let mut bytes = [0u8; DD_MAX_LEN];
        bytes.get_mut(..b.len())?.copy_from_slice(b);
        Some(DdRaw {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The descriptor's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl AsRef<[u8]> for DdRaw {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for DdRaw {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for DdRaw {}

impl fmt::Debug for DdRaw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DdRaw").field(&self.as_bytes()).finish()
    }
}

/// The str0m serializer of the dependency descriptor: bytes in, bytes out,
/// as [`DdRaw`] in `user_values`; video only. Register with
/// [`DdExtension::extension`] and `RtcConfig::set_extension(id, ..)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DdExtension;

impl DdExtension {
    /// The str0m extension for [`DD_URI`].
    pub fn extension() -> Extension {
        Extension::with_serializer(DD_URI, DdExtension)
    }
}

impl ExtensionSerializer for DdExtension {
    fn write_to(&self, buf: &mut [u8], ev: &ExtensionValues) -> usize {
        let Some(raw) = ev.user_values.get::<DdRaw>() else {
            return 0;
        };
        let b = raw.as_bytes();
        match buf.get_mut(..b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                b.len()
            }
            None => 0,
        }
    }

    fn parse_value(&self, buf: &[u8], ev: &mut ExtensionValues) -> bool {
        match DdRaw::new(buf) {
            Some(raw) => {
                ev.user_values.set(raw);
                true
            }
            None => false,
        }
    }

    fn is_video(&self) -> bool {
        true
    }

    fn is_audio(&self) -> bool {
        false
    }

    fn requires_two_byte_form(&self, ev: &ExtensionValues) -> bool {
        ev.user_values
            .get::<DdRaw>()
            .is_some_and(|r| r.len == 0 || r.len > 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use str0m::rtp::{ExtensionMap, RtpHeader};

    use super::Dti::{Discardable as D, NotPresent as N, Required as R, Switch as S};

    fn t(spatial: u8, temporal: u8, dtis: &[Dti], fdiffs: &[u8], chains: &[u8]) -> Template {
        Template::new(spatial, temporal, dtis, fdiffs, chains).unwrap()
    }

    /// Parses a row of DTI symbols as the spec's tables write them.
    fn dtis(row: &str) -> Vec<Dti> {
        row.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| match c {
                'S' => S,
                'D' => D,
                'R' => R,
                _ => N,
            })
            .collect()
    }

    /// AV1 RTP spec A.6.1, L1T3: decode targets 30, 15, 7.5 fps; one chain.
    fn l1t3() -> Structure {
        let templates = vec![
            t(0, 0, &dtis("SSS"), &[], &[0]),
            t(0, 0, &dtis("SSS"), &[4], &[4]),
            t(0, 1, &dtis("SD-"), &[2], &[2]),
            t(0, 2, &dtis("D--"), &[1], &[1]),
            t(0, 2, &dtis("D--"), &[1], &[3]),
        ];
        Structure::new(0, templates, 3, 1, &[0, 0, 0], None).unwrap()
    }

    /// AV1 RTP spec A.6.3, L3T3 full SVC: decode targets HD 30, 15, 7.5,
    /// VGA 30, 15, 7.5, QVGA 30, 15, 7.5 fps; three chains; with render
    /// resolutions (the spec's example has none).
    fn l3t3(offset: u8) -> Structure {
        // Spatial, temporal, frame differences, chain differences, DTIs.
        type Row = (u8, u8, &'static [u8], [u8; 3], &'static str);
        let rows: [Row; 15] = [
            (0, 0, &[], [0, 0, 0], "SSS SSS SSS"),
            (0, 0, &[12], [12, 11, 10], "RRR RRR SSS"),
            (0, 1, &[6], [6, 5, 4], "RR- RR- SD-"),
            (0, 2, &[3], [3, 2, 1], "R-- R-- D--"),
            (0, 2, &[3], [9, 8, 7], "R-- R-- D--"),
            (1, 0, &[1], [1, 1, 1], "SSS SSS ---"),
            (1, 0, &[12, 1], [1, 1, 1], "RRR SSS ---"),
            (1, 1, &[6, 1], [7, 6, 5], "RR- SD- ---"),
            (1, 2, &[3, 1], [4, 3, 2], "R-- D-- ---"),
            (1, 2, &[3, 1], [10, 9, 8], "R-- D-- ---"),
            (2, 0, &[1], [2, 1, 1], "SSS --- ---"),
            (2, 0, &[12, 1], [2, 1, 1], "SSS --- ---"),
            (2, 1, &[6, 1], [8, 7, 6], "SD- --- ---"),
            (2, 2, &[3, 1], [5, 4, 3], "D-- --- ---"),
            (2, 2, &[3, 1], [11, 10, 9], "D-- --- ---"),
        ];
        let templates = rows
            .iter()
            .map(|(sp, tp, fd, ch, row)| t(*sp, *tp, &dtis(row), fd, ch))
            .collect();
        Structure::new(
            offset,
            templates,
            9,
            3,
            &[2, 2, 2, 1, 1, 1, 0, 0, 0],
            Some(&[(320, 180), (640, 360), (1280, 720)]),
        )
        .unwrap()
    }

    /// The frame of template `idx` as the template has it.
    fn frame(s: &Structure, idx: usize, start: bool, end: bool, number: u16) -> DdFrame {
        let tpl = &s.templates()[idx];
        let mut fdiffs = [0u16; MAX_FDIFFS];
        for (d, &f) in fdiffs.iter_mut().zip(tpl.fdiffs()) {
            *d = u16::from(f);
        }
        DdFrame {
            start_of_frame: start,
            end_of_frame: end,
            template_id: ((idx + usize::from(s.template_id_offset())) % 64) as u8,
            frame_number: number,
            spatial: tpl.spatial(),
            temporal: tpl.temporal(),
            structure_attached: false,
            active_decode_targets: None,
            template_index: idx as u8,
            dt_cnt: s.decode_targets() as u8,
            dtis: tpl.dtis,
            fdiff_cnt: tpl.fdiff_cnt,
            fdiffs,
            chain_cnt: s.chains() as u8,
            chain_fdiffs: tpl.chain_fdiffs,
            decode_target: s
                .decode_target_for(tpl.spatial(), tpl.temporal())
                .map(|d| d as u8),
            spatial_layers: None,
        }
    }

    fn write(f: &DdFrame, s: &Structure, attach: bool, active: Option<u32>) -> Vec<u8> {
        let mut out = [0u8; DD_MAX_LEN];
        let n = write_frame(f, s, attach, active, &mut out).unwrap();
        out[..n].to_vec()
    }

    #[test]
    fn ns_round_trips() {
        for n in 1..=40u32 {
            for v in 0..n {
                let mut buf = [0u8; 8];
                let mut w = BitWriter::new(&mut buf);
                w.ns(v, n).unwrap();
                let bits = w.pos;
                assert!(bits as u32 <= ns_width(n), "n {n} v {v}");
                let mut r = BitReader::new(&buf);
                assert_eq!(r.ns(n).unwrap(), v, "n {n}");
                assert_eq!(r.pos, bits);
            }
            let mut buf = [0u8; 8];
            assert!(BitWriter::new(&mut buf).ns(n, n).is_none());
        }
        // ns(1) takes no bits, ns(3): 0 in one bit, 1 and 2 in two.
        let mut r = BitReader::new(&[]);
        assert_eq!(r.ns(1), Ok(0));
        let mut r = BitReader::new(&[0b1100_0000]);
        assert_eq!(r.ns(3), Ok(2));
    }

    #[test]
    fn l1t3_stream() {
        let s = l1t3();
        let mut reader = DdReader::new();
        let mut key = frame(&s, 0, true, true, 100);
        let bytes = write(&key, &s, true, None);
        let got = reader.read(&bytes).unwrap();
        key.structure_attached = true;
        key.spatial_layers = Some(1);
        assert_eq!(got, key);
        assert_eq!(reader.structure().map(|a| &**a), Some(&s));
        assert_eq!(reader.active_decode_targets(), 0b111);
        let svc = got.svc();
        assert!(svc.keyframe && svc.switch_up && svc.frame_start && svc.frame_end);
        assert_eq!(svc.spatial_layers, Some(1));

        // Delta frames: three bytes, against the structure in force.
        // Only the keyframe is a switch-up: the T0 delta frame is a switch
        // for its decode target, but references the previous T0 frame.
        for (idx, temporal, dti_switch) in
            [(1, 0, true), (2, 1, false), (3, 2, false), (4, 2, false)]
        {
            let f = frame(&s, idx, true, false, 101 + idx as u16);
            let bytes = write(&f, &s, false, None);
            assert_eq!(bytes.len(), 3);
            let got = reader.read(&bytes).unwrap();
            assert_eq!(got, f);
            let svc = got.svc();
            assert_eq!((svc.spatial, svc.temporal), (0, temporal));
            assert!(!svc.keyframe);
            assert!(!svc.switch_up, "template {idx}");
            assert_eq!(got.is_switch(), dti_switch, "template {idx}");
            assert_eq!(svc.spatial_layers, None);
            assert_eq!(got.decode_target(), Some(2 - usize::from(temporal)));
        }
        assert_eq!(s.decode_target_for(0, 2), Some(0));
        assert_eq!(s.decode_target_for(0, 0), Some(2));
        assert_eq!(s.decode_target_for(1, 0), None);
        assert_eq!(s.decode_target_layers(1), Some((0, 1)));
        assert_eq!(s.decode_target_layers(0), Some((0, 2)));
        assert_eq!(s.width_of(0), None);
        // The same structure again keeps the same Arc.
        let before = reader.structure().unwrap().clone();
        reader.read(&write(&key, &s, true, None)).unwrap();
        assert!(Arc::ptr_eq(&before, reader.structure().unwrap()));
    }

    #[test]
    fn l3t3_stream() {
        let s = l3t3(10);
        let mut reader = DdReader::new();
        let key = frame(&s, 0, true, false, 7);
        let got = reader.read(&write(&key, &s, true, None)).unwrap();
        let svc = got.svc();
        assert!(svc.keyframe && svc.switch_up);
        assert_eq!(svc.spatial_layers, Some(3));
        assert_eq!(got.template_id, 10);
        let st = reader.structure().unwrap();
        assert_eq!(st.spatial_layers(), 3);
        assert_eq!(st.max_temporal(), 2);
        assert_eq!(st.width_of(1), Some(640));
        assert_eq!(st.height_of(2), Some(720));
        assert_eq!(st.width_of(3), None);
        assert_eq!(st.protected_by(0), Some(2));
        assert_eq!(st.protected_by(8), Some(0));
        assert_eq!(st.decode_target_layers(4), Some((1, 1)));
        assert_eq!(st.decode_target_layers(0), Some((2, 2)));
        for sp in 0..3u8 {
            for tp in 0..3u8 {
                assert_eq!(
                    st.decode_target_for(sp, tp),
                    Some(usize::from((2 - sp) * 3 + (2 - tp)))
                );
            }
        }
        assert_eq!(reader.active_decode_targets(), 0x1ff);

        // Spatial 1 of the key picture: a switch-up, not a keyframe.
        let got = reader
            .read(&write(&frame(&s, 5, true, true, 8), &s, false, None))
            .unwrap();
        let svc = got.svc();
        assert_eq!((svc.spatial, svc.temporal), (1, 0));
        assert!(!svc.keyframe && svc.switch_up && got.is_switch());
        assert_eq!(got.fdiffs(), &[1]);
        // Spatial 1 delta T0: the spec marks it a switch for VGA (for a
        // decoder that has chain 1), but it references the previous
        // spatial 1 frame: no switch-up for an SFU.
        let got = reader
            .read(&write(&frame(&s, 6, true, true, 20), &s, false, None))
            .unwrap();
        assert!(got.is_switch() && !got.svc().switch_up);
        assert_eq!(got.fdiffs(), &[12, 1]);
        assert_eq!(got.chain_fdiffs(), &[1, 1, 1]);
        // Spatial 2 of the key picture, and a spatial 2 T2.
        let got = reader
            .read(&write(&frame(&s, 10, true, true, 9), &s, false, None))
            .unwrap();
        assert!(got.svc().switch_up);
        let got = reader
            .read(&write(&frame(&s, 14, false, true, 23), &s, false, None))
            .unwrap();
        assert_eq!((got.spatial, got.temporal), (2, 2));
        assert_eq!(got.dti(0), Some(D));
        assert_eq!(got.dti(1), Some(N));
        assert_eq!(got.dti(9), None);
        assert!(!got.svc().switch_up);
        // A keyframe's structure without a start is no keyframe.
        assert!(
            reader
                .read(&write(&key, &s, true, None))
                .unwrap()
                .svc()
                .keyframe
        );
        let mut mid = key;
        mid.start_of_frame = false;
        assert!(
            !reader
                .read(&write(&mid, &s, true, None))
                .unwrap()
                .svc()
                .keyframe
        );
    }

    #[test]
    fn custom_fields_round_trip() {
        let s = l3t3(0);
        let mut reader = DdReader::new();
        reader
            .read(&write(&frame(&s, 0, true, true, 1), &s, true, None))
            .unwrap();
        let mut f = frame(&s, 6, true, false, 65535);
        f.dtis[0] = R;
        f.dtis[8] = S;
        f.fdiff_cnt = 4;
        f.fdiffs[..4].copy_from_slice(&[1, 17, 300, 4096]);
        f.chain_fdiffs[..3].copy_from_slice(&[255, 0, 17]);
        f.active_decode_targets = Some(0b1_0101_0101);
        let bytes = write(&f, &s, false, f.active_decode_targets);
        assert!(bytes.len() > 3);
        assert_eq!(reader.read(&bytes).unwrap(), f);
        assert_eq!(reader.active_decode_targets(), 0b1_0101_0101);
        // An attached structure resets the mask to all.
        let mut k = frame(&s, 0, true, true, 2);
        k.structure_attached = true;
        k.spatial_layers = Some(3);
        assert_eq!(reader.read(&write(&k, &s, true, None)).unwrap(), k);
        assert_eq!(reader.active_decode_targets(), 0x1ff);
        // Custom fields with the structure in the same packet.
        let mut fs = f;
        fs.structure_attached = true;
        fs.spatial_layers = Some(3);
        let bytes = write(&fs, &s, true, fs.active_decode_targets);
        assert_eq!(DdReader::new().read(&bytes).unwrap(), fs);
        // fdiffs beyond 4096 cannot be written.
        let mut big = f;
        big.fdiffs[0] = 4097;
        let mut out = [0u8; DD_MAX_LEN];
        assert_eq!(write_frame(&big, &s, false, None, &mut out), None);
        // Nor into a buffer too small.
        assert_eq!(write_frame(&f, &s, true, None, &mut out[..10]), None);
    }

    #[test]
    fn write_with_structure_attaches() {
        let s = l3t3(5);
        let mut reader = DdReader::new();
        reader
            .read(&write(&frame(&s, 0, true, true, 1), &s, true, None))
            .unwrap();
        let mut out = [0u8; DD_MAX_LEN];
        for idx in 0..s.templates().len() {
            let f = frame(&s, idx, idx % 2 == 0, true, 1000 + idx as u16);
            let plain = write(&f, &s, false, None);
            let n = write_with_structure(&plain, &s, None, &mut out).unwrap();
            let mut fresh = DdReader::new();
            let got = fresh.read(&out[..n]).unwrap();
            assert!(got.structure_attached);
            assert_eq!(got.svc().spatial_layers, Some(3));
            assert_eq!(fresh.structure().map(|a| &**a), Some(&s));
            let mut want = f;
            want.structure_attached = true;
            want.spatial_layers = Some(3);
            assert_eq!(got, want);
            // The same packet read by the publisher's reader.
            assert_eq!(reader.read(&plain).unwrap(), f);
            // With a mask.
            let n = write_with_structure(&plain, &s, Some(0b111), &mut out).unwrap();
            let mut fresh = DdReader::new();
            assert_eq!(
                fresh.read(&out[..n]).unwrap().active_decode_targets,
                Some(0b111)
            );
            assert_eq!(fresh.active_decode_targets(), 0b111);
        }
        // A descriptor that carries a structure is copied.
        let with = write(&frame(&s, 0, true, true, 1), &s, true, None);
        let n = write_with_structure(&with, &s, None, &mut out).unwrap();
        assert_eq!(&out[..n], &with[..]);
        // The active decode targets alone.
        let plain = write(&frame(&s, 3, true, true, 4), &s, false, None);
        let n = write_active_decode_targets(&plain, &s, 0b11, &mut out).unwrap();
        let got = reader.read(&out[..n]).unwrap();
        assert_eq!(got.active_decode_targets, Some(0b11));
        assert!(!got.structure_attached);
        assert_eq!(reader.active_decode_targets(), 0b11);
        // Garbage is refused.
        assert_eq!(write_with_structure(&[1], &s, None, &mut out), None);
    }

    #[test]
    fn every_truncation_errs() {
        let s = l3t3(3);
        let mut f = frame(&s, 5, true, true, 9);
        f.dtis[1] = S;
        f.fdiff_cnt = 2;
        f.fdiffs[..2].copy_from_slice(&[300, 2]);
        f.chain_fdiffs[0] = 200;
        let full = write(&f, &s, true, Some(0b11));
        assert!(DdReader::new().read(&full).is_ok());
        for len in 0..full.len() {
            let mut reader = DdReader::new();
            let err = reader.read(&full[..len]).unwrap_err();
            let want = if len == 3 {
                DdError::NoStructure
            } else {
                DdError::Truncated
            };
            assert_eq!(err, want, "len {len}");
            assert!(reader.structure().is_none());
        }
        // Custom fields without a structure, against a reader that has it.
        let custom = write(&f, &s, false, Some(0b11));
        let mut reader = DdReader::new();
        reader.read(&full).unwrap();
        assert!(reader.read(&custom).is_ok());
        for len in 0..custom.len() {
            let r = reader.read(&custom[..len]);
            if len == 3 {
                // A valid mandatory-only descriptor.
                assert!(r.is_ok());
            } else {
                assert_eq!(r.unwrap_err(), DdError::Truncated, "len {len}");
            }
        }
    }

    #[test]
    fn template_outside_structure_errs() {
        let s = l1t3();
        let mut reader = DdReader::new();
        reader
            .read(&write(&frame(&s, 0, true, true, 1), &s, true, None))
            .unwrap();
        // Templates 0..5 have ids 0..5.
        assert!(reader.read(&[0b1000_0100, 0, 1]).is_ok());
        assert_eq!(
            reader.read(&[0b1000_0101, 0, 1]),
            Err(DdError::UnknownTemplate)
        );
        assert_eq!(
            reader.read(&[0b1011_1111, 0, 1]),
            Err(DdError::UnknownTemplate)
        );
        // With an offset of 62: ids 62, 63, 0, 1, 2.
        let s = Structure::new(62, s.templates().to_vec(), 3, 1, &[0, 0, 0], None).unwrap();
        let mut reader = DdReader::new();
        let got = reader
            .read(&write(&frame(&s, 0, true, true, 1), &s, true, None))
            .unwrap();
        assert_eq!(got.template_id, 62);
        for (id, idx) in [(62u8, 0usize), (63, 1), (0, 2), (1, 3), (2, 4)] {
            let got = reader.read(&[0x80 | id, 0, 2]).unwrap();
            assert_eq!(got.template_index(), idx);
        }
        for id in 3..62u8 {
            assert_eq!(reader.read(&[id, 0, 2]), Err(DdError::UnknownTemplate));
        }
        // A refused descriptor leaves the state alone.
        assert_eq!(reader.structure().map(|a| &**a), Some(&s));
    }

    #[test]
    fn no_structure_errs() {
        let mut reader = DdReader::new();
        assert_eq!(reader.read(&[0xc0, 0, 1]), Err(DdError::NoStructure));
        // Extended, no structure flag, custom DTIs.
        assert_eq!(
            reader.read(&[0xc0, 0, 1, 0b0010_0000, 0]),
            Err(DdError::NoStructure)
        );
        // Active decode targets without a structure.
        assert_eq!(
            reader.read(&[0xc0, 0, 1, 0b0100_0000]),
            Err(DdError::NoStructure)
        );
        let m = DdMandatory::parse(&[0b1011_0001, 0x12, 0x34]).unwrap();
        assert_eq!(
            m,
            DdMandatory {
                start_of_frame: true,
                end_of_frame: false,
                template_id: 0b11_0001,
                frame_number: 0x1234,
            }
        );
        assert_eq!(DdMandatory::parse(&[0, 0]), Err(DdError::Truncated));
        assert_eq!(reader.read(&[]), Err(DdError::Truncated));
        assert_eq!(reader.active_decode_targets(), 0);
    }

    /// Mandatory fields (template 0) and the extended flags with only the
    /// structure present, for a hand-written structure after them.
    fn hostile(build: impl Fn(&mut BitWriter<'_>) -> Option<()>) -> Vec<u8> {
        let mut buf = [0u8; 4096];
        let mut w = BitWriter::new(&mut buf);
        w.bits(0b1100_0000, 8).unwrap();
        w.bits(0, 16).unwrap();
        w.bits(0b10000, 5).unwrap();
        build(&mut w).unwrap();
        let n = w.len();
        buf[..n].to_vec()
    }

    #[test]
    fn hostile_counts() {
        // 32 decode targets, one template, a 32-bit active mask.
        let bytes = hostile(|w| {
            w.bits(0, 6)?;
            w.bits(31, 5)?;
            w.bits(3, 2)?;
            for _ in 0..32 {
                w.bits(2, 2)?;
            }
            w.bit(false)?; // no fdiffs
            w.ns(32, 33)?; // 32 chains
            for dt in 0..32 {
                w.ns(dt, 32)?;
            }
            for c in 0..32 {
                w.bits(c % 16, 4)?;
            }
            w.bit(false)
        });
        let mut reader = DdReader::new();
        let got = reader.read(&bytes).unwrap();
        assert_eq!(got.dtis().len(), 32);
        assert_eq!(got.chain_fdiffs().len(), 32);
        let st = reader.structure().unwrap().clone();
        assert_eq!((st.decode_targets(), st.chains()), (32, 32));
        assert_eq!(st.protected_by(31), Some(31));
        assert_eq!(reader.active_decode_targets(), u32::MAX);
        // A 32-bit mask, then custom chains.
        let mut f = got;
        f.structure_attached = false;
        f.spatial_layers = None;
        f.active_decode_targets = Some(0x8000_0001);
        f.chain_fdiffs[31] = 255;
        let bytes = write(&f, &st, false, f.active_decode_targets);
        assert_eq!(reader.read(&bytes).unwrap(), f);
        assert_eq!(reader.active_decode_targets(), 0x8000_0001);
        // Re-serialised with its structure, it still fits.
        let mut out = [0u8; DD_MAX_LEN];
        let n = write_with_structure(&bytes, &st, None, &mut out).unwrap();
        assert!(DdReader::new().read(&out[..n]).is_ok());

        // 65 templates.
        let bytes = hostile(|w| {
            w.bits(0, 6)?;
            w.bits(0, 5)?;
            for _ in 0..64 {
                w.bits(0, 2)?;
            }
            w.bits(3, 2)
        });
        assert_eq!(DdReader::new().read(&bytes), Err(DdError::TooManyTemplates));
        // 64 is the most.
        let bytes = hostile(|w| {
            w.bits(0, 6)?;
            w.bits(0, 5)?;
            for _ in 0..63 {
                w.bits(0, 2)?;
            }
            w.bits(3, 2)?;
            for _ in 0..64 {
                w.bits(1, 2)?; // dti
            }
            for _ in 0..64 {
                w.bit(false)?; // fdiffs
            }
            w.ns(0, 2)?;
            w.bit(false)
        });
        let mut reader = DdReader::new();
        reader.read(&bytes).unwrap();
        assert_eq!(reader.structure().unwrap().templates().len(), 64);
        // Spatial 4 and temporal 8.
        for idc in [2u32, 1] {
            let bytes = hostile(|w| {
                w.bits(0, 6)?;
                w.bits(0, 5)?;
                for _ in 0..8 {
                    w.bits(idc, 2)?;
                }
                w.bits(3, 2)
            });
            assert_eq!(DdReader::new().read(&bytes), Err(DdError::TooManyLayers));
        }
        // 16 fdiffs in a template.
        let bytes = hostile(|w| {
            w.bits(0, 6)?;
            w.bits(0, 5)?;
            w.bits(3, 2)?;
            w.bits(2, 2)?;
            for _ in 0..16 {
                w.bit(true)?;
                w.bits(0, 4)?;
            }
            w.bit(false)?;
            w.ns(0, 2)?;
            w.bit(false)
        });
        assert_eq!(DdReader::new().read(&bytes), Err(DdError::TooManyFdiffs));
        // 16 custom fdiffs in a frame.
        let s = l1t3();
        let mut reader = DdReader::new();
        reader
            .read(&write(&frame(&s, 0, true, true, 1), &s, true, None))
            .unwrap();
        let mut buf = [0u8; 64];
        let mut w = BitWriter::new(&mut buf);
        w.bits(0x80, 8).unwrap();
        w.bits(0, 16).unwrap();
        w.bits(0b00010, 5).unwrap();
        for _ in 0..16 {
            w.bits(1, 2).unwrap();
            w.bits(0, 4).unwrap();
        }
        w.bits(0, 2).unwrap();
        let n = w.len();
        assert_eq!(reader.read(&buf[..n]), Err(DdError::TooManyFdiffs));
        // 15 is the most.
        let mut w = BitWriter::new(&mut buf);
        w.bits(0x80, 8).unwrap();
        w.bits(0, 16).unwrap();
        w.bits(0b00010, 5).unwrap();
        for _ in 0..15 {
            w.bits(3, 2).unwrap();
            w.bits(0xfff, 12).unwrap();
        }
        w.bits(0, 2).unwrap();
        let n = w.len();
        assert_eq!(reader.read(&buf[..n]).unwrap().fdiffs(), &[4096; 15]);
    }

    #[test]
    fn hand_built_structures_are_checked() {
        let k = t(0, 0, &[S], &[], &[]);
        assert!(Structure::new(0, vec![], 1, 0, &[], None).is_none());
        assert!(Structure::new(64, vec![k.clone()], 1, 0, &[], None).is_none());
        // The first template must be spatial 0 temporal 0; gaps cannot be said.
        assert!(Structure::new(0, vec![t(0, 1, &[S], &[], &[])], 1, 0, &[], None).is_none());
        assert!(
            Structure::new(0, vec![k.clone(), t(0, 2, &[S], &[], &[])], 1, 0, &[], None).is_none()
        );
        // Decode targets and chains must agree.
        assert!(Structure::new(0, vec![k.clone()], 2, 0, &[], None).is_none());
        assert!(Structure::new(0, vec![k.clone()], 1, 1, &[0], None).is_none());
        assert!(Structure::new(0, vec![t(0, 0, &[S], &[], &[0])], 1, 1, &[1], None).is_none());
        // Resolutions: one per spatial layer, none zero.
        assert!(Structure::new(0, vec![k.clone()], 1, 0, &[], Some(&[(0, 1)])).is_none());
        assert!(Structure::new(0, vec![k.clone()], 1, 0, &[], Some(&[(1, 1), (2, 2)])).is_none());
        assert!(Template::new(4, 0, &[S], &[], &[]).is_none());
        assert!(Template::new(0, 0, &[S], &[17], &[]).is_none());
        assert!(Template::new(0, 0, &[S], &[], &[16]).is_none());
        assert!(Template::new(0, 0, &[], &[], &[]).is_none());
        let one = Structure::new(0, vec![k], 1, 0, &[], Some(&[(65535, 1)])).unwrap();
        let mut reader = DdReader::new();
        reader
            .read(&write(&frame(&one, 0, true, true, 1), &one, true, None))
            .unwrap();
        assert_eq!(reader.structure().unwrap().resolution(0), Some((65535, 1)));
        assert_eq!(reader.structure().unwrap().protected_by(0), None);
    }

    /// What the fuzz target checks, on mutations of valid descriptors: no
    /// panic, and a second packet that reads writes back with the structure
    /// attached and reads the same on a fresh reader.
    #[test]
    fn mutated_descriptors() {
        let mut rng = fastrand::Rng::with_seed(0xdd);
        let s = l3t3(7);
        let mut custom = frame(&s, 12, true, false, 500);
        custom.dtis[2] = R;
        custom.fdiff_cnt = 3;
        custom.fdiffs[..3].copy_from_slice(&[1, 40, 999]);
        custom.chain_fdiffs[1] = 99;
        let seeds = [
            write(&frame(&s, 0, true, true, 1), &s, true, None),
            write(&frame(&s, 3, true, true, 2), &s, false, None),
            write(&custom, &s, false, Some(0x0f)),
            write(&custom, &s, true, Some(0x1f0)),
            write(&frame(&l1t3(), 2, true, true, 3), &l1t3(), true, None),
        ];
        let mutate = |rng: &mut fastrand::Rng, b: &[u8]| -> Vec<u8> {
            let mut v = b.to_vec();
            for _ in 0..rng.usize(0..4) {
                match rng.u8(0..4) {
                    0 if !v.is_empty() => {
                        let i = rng.usize(0..v.len());
                        v[i] ^= 1 << rng.u8(0..8);
                    }
                    1 => v.truncate(rng.usize(0..=v.len())),
                    2 => v.push(rng.u8(..)),
                    _ => {}
                }
            }
            v
        };
        let mut read = 0;
        for _ in 0..20_000 {
            let (i, j) = (rng.usize(0..seeds.len()), rng.usize(0..seeds.len()));
            let a = mutate(&mut rng, &seeds[i]);
            let b = mutate(&mut rng, &seeds[j]);
            let mut reader = DdReader::new();
            let _ = reader.read(&a);
            let Ok(f) = reader.read(&b) else {
                continue;
            };
            let Some(st) = reader.structure() else {
                panic!("a frame read without a structure");
            };
            let mut out = [0u8; DD_MAX_LEN];
            let Some(n) = write_with_structure(&b, st, None, &mut out) else {
                continue;
            };
            read += 1;
            let mut fresh = DdReader::new();
            let mut again = fresh.read(&out[..n]).unwrap();
            assert_eq!(fresh.structure().map(|a| &**a), Some(&**st));
            assert!(again.structure_attached);
            again.structure_attached = f.structure_attached;
            if !f.structure_attached {
                again.spatial_layers = None;
            }
            assert_eq!(again, f, "{b:02x?}");
        }
        assert!(read > 1000, "{read}");
    }

    fn ext_map() -> ExtensionMap {
        let mut exts = ExtensionMap::empty();
        exts.set(5, DdExtension::extension());
        exts
    }

    #[test]
    fn str0m_round_trip() {
        let exts = ext_map();
        assert_eq!(exts.id_of(DdExtension::extension()), Some(5));
        let s = l3t3(0);
        for dd in [
            write(&frame(&s, 2, true, true, 3), &s, false, None),
            write(&frame(&s, 0, true, true, 3), &s, true, None),
        ] {
            let mut header = RtpHeader::default();
            header.ext_vals.user_values.set(DdRaw::new(&dd).unwrap());
            let mut buf = [0u8; 1500];
            let n = header.write_to(&mut buf, &exts);
            // One-byte form (0xBEDE) for three bytes, two-byte for more than 16.
            let form = u16::from_be_bytes([buf[12], buf[13]]);
            assert_eq!(form == 0xBEDE, dd.len() <= 16, "len {}", dd.len());
            let parsed = RtpHeader::parse(&buf[..n], &exts).unwrap();
            let raw = parsed.ext_vals.user_values.get::<DdRaw>().unwrap();
            assert_eq!(raw.as_bytes(), &dd[..]);
            // Not there: nothing written.
            let empty = RtpHeader::default();
            let n = empty.write_to(&mut buf, &exts);
            let parsed = RtpHeader::parse(&buf[..n], &exts).unwrap();
            assert!(parsed.ext_vals.user_values.get::<DdRaw>().is_none());
        }
    }

    #[test]
    fn serializer_methods() {
        let x = DdExtension;
        assert!(x.is_video() && !x.is_audio());
        let mut ev = ExtensionValues::default();
        assert!(!x.requires_two_byte_form(&ev));
        let mut buf = [0u8; 32];
        assert_eq!(x.write_to(&mut buf, &ev), 0);
        assert!(x.parse_value(&[1, 2, 3], &mut ev));
        assert!(!x.requires_two_byte_form(&ev));
        assert_eq!(x.write_to(&mut buf, &ev), 3);
        assert_eq!(&buf[..3], &[1, 2, 3]);
        assert!(x.parse_value(&[7; 17], &mut ev));
        assert!(x.requires_two_byte_form(&ev));
        assert_eq!(x.write_to(&mut buf[..16], &ev), 0);
        assert!(x.parse_value(&[], &mut ev));
        assert!(x.requires_two_byte_form(&ev));
        assert!(DdRaw::new(&[0; 256]).is_none());
        assert_eq!(DdRaw::new(&[0; 255]).unwrap().as_bytes().len(), 255);
    }
}
