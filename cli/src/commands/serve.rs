//! `serve`: the relay over TCP and, optionally, WebSocket, with an optional archive.

use std::path::Path;

use bsor_stream::net::relay::{RelayConfig, Tokens};
use bsor_stream::net::server::{Server, ServerConfig};
use bsor_stream::net::{tcp, tls, ws};

use super::{Failure, Outcome};

/// TLS and browser settings of `serve`.
pub struct Exposure<'a> {
    /// Certificate chain and key (PEM) for TLS on both listeners.
    pub tls: Option<(&'a Path, &'a Path)>,
    /// Origins whose pages may connect over WebSocket (empty: the same host only).
    pub allowed_origins: Vec<String>,
}

/// `serve --tcp ADDR [--ws ADDR] [--archive DIR] --token-file FILE [--tls-cert PEM --tls-key
/// PEM] [--allow-origin ORIGIN]...`: prints `listening tcp=ADDR[ ws=ADDR]` (the bound
/// addresses) when ready, runs until Ctrl-C, then finishes the archive files.
pub fn serve(
    tcp_addr: &str,
    ws_addr: Option<&str>,
    archive: Option<&Path>,
    token_file: &Path,
    exposure: Exposure<'_>,
) -> Result<Outcome, Failure> {
    // Logs on stderr (stdout carries the `listening` line): RUST_LOG sets the level, info
    // by default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let text = std::fs::read_to_string(token_file).map_err(|e| (token_file, e))?;
    let tokens = Tokens::parse(&text);
    let tls = match exposure.tls {
        Some((cert, key)) => {
            Some(tls::server_config(cert, key).map_err(|e| Failure(e.to_string()))?)
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    runtime.block_on(async {
        let bind = |addr: String| async move {
            let l = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| Failure(format!("{addr}: {e}")))?;
            let bound = l
                .local_addr()
                .map_err(|e| Failure(format!("{addr}: {e}")))?;
            Ok::<_, Failure>((l, bound))
        };
        let (tcp_listener, tcp_bound) = bind(tcp_addr.to_string()).await?;
        let ws_listener = match ws_addr {
            Some(a) => Some(bind(a.to_string()).await?),
            None => None,
        };
        let config = ServerConfig {
            archive: archive.map(Path::to_path_buf),
            ..ServerConfig::default()
        };
        let server = Server::new(RelayConfig::default(), tokens, config).map_err(|e| {
            Failure(format!(
                "{}: {e}",
                archive.unwrap_or(Path::new("")).display()
            ))
        })?;
        let mut tasks = vec![match &tls {
            Some(tls) => tokio::spawn(tcp::serve_tls(tcp_listener, server.clone(), tls.clone())),
            None => tokio::spawn(tcp::serve(tcp_listener, server.clone())),
        }];
        match ws_listener {
            Some((l, ws_bound)) => {
                let options = ws::WsOptions {
                    tls: tls.clone(),
                    allowed_origins: exposure.allowed_origins,
                };
                tasks.push(tokio::spawn(ws::serve_with(l, server.clone(), options)));
                println!("listening tcp={tcp_bound} ws={ws_bound}");
            }
            None => println!("listening tcp={tcp_bound}"),
        }
        let tls = tls.is_some();
        tracing::info!(%tcp_bound, ws = ?ws_addr, tls, archive = ?archive, "relay ready");
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C: stopping, finishing the archives");
        for t in tasks {
            t.abort();
        }
        server
            .shutdown()
            .map_err(|e| Failure(format!("finishing the archive: {e}")))?;
        Ok(Outcome::Done)
    })
}
