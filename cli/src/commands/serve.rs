//! `serve`: the relay over TCP and, optionally, WebSocket, with an optional archive.

use std::path::Path;

use bsor_stream::net::relay::{RelayConfig, Tokens};
use bsor_stream::net::server::{Server, ServerConfig};
use bsor_stream::net::{tcp, ws};

use super::{Failure, Outcome};

/// The relay's memory and connection budgets (`wire.md` §3.2), as `serve` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct Budgets {
    /// Connections from one IP address at once (0: no limit); one more gets OverBudget.
    #[arg(long, value_name = "N", default_value_t = RelayConfig::default().connections_per_address)]
    pub max_per_address: usize,
    /// Connections served at once, over all listeners.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().max_connections)]
    pub max_connections: usize,
    /// Bytes of recent chunks each session keeps in memory (older ones are read from the
    /// archive).
    #[arg(long, value_name = "BYTES", default_value_t = RelayConfig::default().backlog_bytes)]
    pub backlog_bytes: usize,
    /// Bytes of chunks all sessions together keep in memory; a publisher whose chunk does
    /// not fit gets OverBudget.
    #[arg(long, value_name = "BYTES", default_value_t = RelayConfig::default().total_backlog_bytes)]
    pub total_backlog_bytes: usize,
}

/// `serve --tcp ADDR [--ws ADDR] [--archive DIR] --token-file FILE`: prints
/// `listening tcp=ADDR[ ws=ADDR]` (the bound addresses) when ready, runs until Ctrl-C, then
/// finishes the archive files.
pub fn serve(
    tcp_addr: &str,
    ws_addr: Option<&str>,
    archive: Option<&Path>,
    token_file: &Path,
    budgets: &Budgets,
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
            max_connections: budgets.max_connections,
            ..ServerConfig::default()
        };
        let relay = RelayConfig {
            connections_per_address: budgets.max_per_address,
            backlog_bytes: budgets.backlog_bytes,
            total_backlog_bytes: budgets.total_backlog_bytes,
            ..RelayConfig::default()
        };
        let server = Server::new(relay, tokens, config).map_err(|e| {
            Failure(format!(
                "{}: {e}",
                archive.unwrap_or(Path::new("")).display()
            ))
        })?;
        let mut tasks = vec![tokio::spawn(tcp::serve(tcp_listener, server.clone()))];
        match ws_listener {
            Some((l, ws_bound)) => {
                tasks.push(tokio::spawn(ws::serve(l, server.clone())));
                println!("listening tcp={tcp_bound} ws={ws_bound}");
            }
            None => println!("listening tcp={tcp_bound}"),
        }
        tracing::info!(%tcp_bound, ws = ?ws_addr, archive = ?archive, "relay ready");
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
