//! The fuzz targets' shared harness lives in `crates/fuzz-harness` (a member
//! of the main workspace, so `cargo test --workspace` tests it and its seeds
//! with the dependencies already built); this crate re-exports it for the
//! targets and examples.

pub use corelay_fuzz_harness::*;
