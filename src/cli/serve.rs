//! `serve`: the relay over TCP (WebSocket and the archive are still to come).

use std::path::Path;
use std::time::Duration;

use bsor_stream::net::relay::{Relay, RelayConfig, Tokens};
use bsor_stream::net::{tcp, wire};

use super::{Failure, Outcome};

/// `serve --tcp ADDR --token-file FILE`: prints `listening tcp=ADDR` when ready, runs until
/// Ctrl-C.
pub fn serve(tcp_addr: &str, token_file: &Path) -> Result<Outcome, Failure> {
    let text = std::fs::read_to_string(token_file).map_err(|e| (token_file, e))?;
    let tokens = Tokens::parse(&text);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(tcp_addr)
            .await
            .map_err(|e| Failure(format!("{tcp_addr}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Failure(format!("{tcp_addr}: {e}")))?;
        println!("listening tcp={addr}");
        let relay = Relay::new(RelayConfig::default(), tokens);
        let server = tokio::spawn(tcp::serve(
            listener,
            relay,
            wire::DEFAULT_MAX_FRAME,
            Duration::from_millis(100),
        ));
        let _ = tokio::signal::ctrl_c().await;
        server.abort();
        Ok(Outcome::Done)
    })
}
