//! Arbitrary bytes as two dependency descriptors of one published stream
//! (`svc::dd`): the first byte splits the rest into a descriptor that may
//! carry a template structure and the packet after it, both read by one
//! `DdReader` as the engine reads a stream's packets. A second packet that
//! reads is then re-serialised with the reader's structure attached
//! (`write_with_structure`, what a subscriber's first packet after a switch
//! gets) and must read back, on a fresh reader, as the same frame.
#![no_main]

use corelay_core::svc::dd::{DD_MAX_LEN, DdReader, write_with_structure};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (first, second) = rest.split_at(usize::from(split).min(rest.len()));
    let mut reader = DdReader::new();
    let _ = reader.read(first);
    let Ok(frame) = reader.read(second) else {
        return;
    };
    let _ = frame.svc();
    let Some(structure) = reader.structure() else {
        return;
    };
    let mut out = [0u8; DD_MAX_LEN];
    // None: the structure is too large for one extension.
    let Some(n) = write_with_structure(second, structure, None, &mut out) else {
        return;
    };
    let mut fresh = DdReader::new();
    let mut again = fresh.read(&out[..n]).expect("a written descriptor reads");
    assert!(again.structure_attached);
    assert_eq!(fresh.structure().map(|s| &**s), Some(&**structure));
    again.structure_attached = frame.structure_attached;
    if !frame.structure_attached {
        assert_eq!(again.svc().spatial_layers, Some(structure.spatial_layers()));
    }
    assert_eq!(
        again.svc().switch_up,
        frame.svc().switch_up || again.svc().keyframe
    );
    assert_eq!(again.fdiffs(), frame.fdiffs());
    assert_eq!(again.dtis(), frame.dtis());
    assert_eq!(again.chain_fdiffs(), frame.chain_fdiffs());
    assert_eq!(
        (
            again.spatial,
            again.temporal,
            again.frame_number,
            again.template_id
        ),
        (
            frame.spatial,
            frame.temporal,
            frame.frame_number,
            frame.template_id
        )
    );
    assert_eq!(
        (
            again.start_of_frame,
            again.end_of_frame,
            again.active_decode_targets
        ),
        (
            frame.start_of_frame,
            frame.end_of_frame,
            frame.active_decode_targets
        )
    );
});
