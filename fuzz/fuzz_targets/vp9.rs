//! Arbitrary bytes as a VP9 RTP payload: the payload descriptor parser
//! (`corelay_core::svc::vp9::parse`) must never panic, and what it accepts
//! must leave VP9 data after the descriptor, with its derived answers
//! (`svc`, `width_of`) computable for any layer.
#![no_main]

use corelay_core::svc::vp9;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    if let Ok(d) = vp9::parse(data) {
        assert!(d.header_len <= data.len());
        assert!(
            d.header_len < data.len(),
            "no VP9 data after the descriptor"
        );
        assert!(d.p_diffs().len() <= vp9::MAX_P_DIFFS);
        let svc = d.svc();
        assert!(!svc.keyframe || svc.switch_up);
        for spatial in 0..=u8::MAX {
            let _ = d.width_of(spatial);
        }
    }
});
