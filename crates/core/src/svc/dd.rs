//! The dependency descriptor RTP header extension. Being written.
