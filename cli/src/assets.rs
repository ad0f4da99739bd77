//! The browser player's files (`web/`, less its README), embedded at build time by
//! `build.rs`, as the relay serves them (`proto-spec/http.md` §3).

use bsor_stream::net::http::Assets;

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// The embedded page, for `serve` and `demo`.
pub fn web() -> Assets {
    Assets::new(
        WEB.iter()
            .map(|(name, bytes)| (*name, bytes::Bytes::from_static(bytes))),
    )
}
