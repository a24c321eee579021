//! The demo page and the WHEP viewer, embedded in the binary at build time.

pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

pub const INDEX: &str = include_str!("../../assets/index.html");
pub const WATCH: &str = include_str!("../../assets/watch.html");

/// Files served under `/assets/`.
pub const FILES: &[Asset] = &[
    Asset {
        path: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../assets/app.js"),
    },
    Asset {
        path: "watch.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../assets/watch.js"),
    },
    Asset {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../assets/style.css"),
    },
];
