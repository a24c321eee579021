//! Simulcast as the client speaks it: three encodings of one camera track,
//! rids `q`, `h`, `f` (low, mid, high), offered in that order with
//! `a=simulcast:send q;h;f`, and the SFU's dynacast message on the data
//! channel that pauses and resumes them:
//!
//! ```json
//! {"type":"layers","mid":"<the publisher's video mid>","active":["q","h"]}
//! ```
//!
//! Until such a message arrives every layer is sent. A layer that becomes
//! active again starts with a keyframe.

use crate::payload::{LAYER_NONE, MAX_LAYER};

/// The rids, low to high. Layer `i` is stamped as `i + 1` in payloads.
pub const RIDS: [&str; 3] = ["q", "h", "f"];

/// The payload stamp's `layer` for the rid at position `i` of [`RIDS`].
pub fn layer_of(i: usize) -> u8 {
    (i as u8).saturating_add(1).min(MAX_LAYER)
}

/// The rid a stamp's `layer` stands for (`"-"` for [`LAYER_NONE`]).
pub fn rid_of_layer(layer: u8) -> &'static str {
    match layer {
        LAYER_NONE => "-",
        l => RIDS.get(usize::from(l) - 1).copied().unwrap_or("?"),
    }
}

/// The active set of a `layers` message for the track `mid`, as a bit mask
/// over [`RIDS`] (bit i: `RIDS[i]` active). `None` when the message is
/// not a `layers` message for this track, or has no `active` array.
/// Unknown rids are ignored.
pub fn active_mask(msg: &serde_json::Value, mid: &str) -> Option<u8> {
    if msg.get("type")?.as_str()? != "layers" || msg.get("mid")?.as_str()? != mid {
        return None;
    }
    let mut mask = 0u8;
    for r in msg.get("active")?.as_array()? {
        if let Some(i) = r.as_str().and_then(|r| RIDS.iter().position(|x| *x == r)) {
            mask |= 1 << i;
        }
    }
    Some(mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layers_message() {
        let m = json!({"type":"layers","mid":"0","active":["q","h"]});
        assert_eq!(active_mask(&m, "0"), Some(0b011));
        assert_eq!(active_mask(&m, "1"), None);
        let m = json!({"type":"layers","mid":"0","active":["f","x"]});
        assert_eq!(active_mask(&m, "0"), Some(0b100));
        let m = json!({"type":"layers","mid":"0","active":[]});
        assert_eq!(active_mask(&m, "0"), Some(0));
        assert_eq!(active_mask(&json!({"type":"layers","mid":"0"}), "0"), None);
        assert_eq!(
            active_mask(&json!({"type":"slot","mid":"0","active":["q"]}), "0"),
            None
        );
    }

    #[test]
    fn layer_numbers() {
        assert_eq!((layer_of(0), layer_of(1), layer_of(2)), (1, 2, 3));
        assert_eq!(rid_of_layer(0), "-");
        assert_eq!(rid_of_layer(1), "q");
        assert_eq!(rid_of_layer(3), "f");
    }
}
