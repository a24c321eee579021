//! Dev tool that records the RTP a browser publishes into `.crtp` fixtures
//! (see `crates/core/tests/fixtures/svc/README.md`), and the reader for them.

pub mod fixture;
