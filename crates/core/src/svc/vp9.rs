//! The VP9 RTP payload descriptor (RFC 9628 section 4.2). Being written.
