//! `serve`: the relay over TCP and, optionally, WebSocket (with the player's page, the
//! session list and the archive over HTTP on the same address), with an optional archive.

use std::path::Path;

use bsor_stream::net::relay::{RelayConfig, Tokens};
use bsor_stream::net::server::{Server, ServerConfig};
use bsor_stream::net::{tcp, tls, ws};
use bsor_stream::server::{self, ReplayServer, Uploaders};
use bsor_stream::stream::Profile;

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
    /// Connections at once in a TLS handshake or an HTTP request not upgraded to a
    /// WebSocket, over all addresses (0: no limit).
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().max_handshakes)]
    pub max_handshakes: usize,
    /// Bytes of recent chunks each session keeps in memory (older ones are read from the
    /// archive).
    #[arg(long, value_name = "BYTES", default_value_t = RelayConfig::default().backlog_bytes)]
    pub backlog_bytes: usize,
    /// Bytes of chunks all sessions together keep in memory; a publisher whose chunk does
    /// not fit gets OverBudget.
    #[arg(long, value_name = "BYTES", default_value_t = RelayConfig::default().total_backlog_bytes)]
    pub total_backlog_bytes: usize,
}

/// The replay server of `serve` (`http.md` §7): on when `--store` is given.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ReplayArgs {
    /// Turn the replay server on (`/replays` on the WebSocket address, which it needs):
    /// blobs in this directory (created if missing), or in an S3-compatible bucket,
    /// `s3://BUCKET[/PREFIX]`, with credentials, region and endpoint from the AWS_*
    /// environment variables (AWS_ENDPOINT and AWS_ALLOW_HTTP=true for a server of one's own).
    #[arg(long, value_name = "LOCATION", requires = "ws")]
    pub store: Option<String>,
    /// The index: `sqlite://PATH` or `postgres://USER@HOST/DB`. Default: SQLite at
    /// LOCATION/index.sqlite for a directory; required with an S3 store.
    #[arg(long, value_name = "URL", requires = "store")]
    pub index: Option<String>,
    /// Countersign each accepted upload with this Ed25519 key (a file of 64 hex digits, as
    /// `keygen` writes), in a statement stored beside it.
    #[arg(long, value_name = "KEYFILE", requires = "store")]
    pub server_key: Option<std::path::PathBuf>,
    /// Store uploaded BSOR files in the compact profile instead of lossless (smaller; the
    /// BSOR served back is then no longer the uploaded bytes).
    #[arg(long, requires = "store")]
    pub store_compact: bool,
    /// Turn off the replay server's caps per address and its byte pace per address
    /// (proto-spec/http.md §8.15), keeping the caps in all: for a load tool that stands
    /// for many clients from one address, never for a server facing the Internet.
    #[arg(long, requires = "store")]
    pub no_address_caps: bool,
    /// How long an upload's lease lasts, in seconds (default 600): the blob of an upload
    /// not committed by then is removed by the sweeper.
    #[arg(long, value_name = "SECONDS", requires = "store",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub lease_seconds: Option<u64>,
    /// Seconds between the sweeper's runs (default 30).
    #[arg(long, value_name = "SECONDS", requires = "store",
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub sweep_seconds: Option<u64>,
    /// Trust this witness's public key (64 hex digits; repeatable): its statements that
    /// check against a replay date it, and of two players' uploads of one play the one that
    /// existed first owns it (http.md §8.2.2). The relay's own --witness-key is trusted too.
    #[arg(long, value_name = "PUBHEX", requires = "store")]
    pub trust_witness: Vec<String>,
    /// The server's name in key registration proofs (http.md §8.13): the name clients sign
    /// with each key they register, so that a proof made for one server is worth nothing on
    /// another. Servers sharing an index give the same name (their public host name, say).
    /// Default: the host part of the --ws address as given (`127.0.0.1` for
    /// `127.0.0.1:8080`).
    #[arg(long, value_name = "NAME", requires = "store")]
    pub server_name: Option<String>,
}

/// The server's name for key registration proofs: `--server-name`, or the host of the
/// WebSocket address as given.
fn server_name(args: &ReplayArgs, ws_addr: Option<&str>) -> Result<String, Failure> {
    let name = match (&args.server_name, ws_addr) {
        (Some(n), _) => n.clone(),
        (None, Some(a)) => match a.rsplit_once(':') {
            Some((host, _)) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            None => a.to_string(),
        },
        (None, None) => "localhost".to_string(),
    };
    if name.is_empty() || name.len() > bsor_stream::integrity::MAX_REGISTRATION_FIELD {
        return Err(Failure(format!(
            "--server-name {name:?}: 1 to {} bytes",
            bsor_stream::integrity::MAX_REGISTRATION_FIELD
        )));
    }
    Ok(name)
}

/// The witness keys a replay server trusts: each `--trust-witness`, then `own` (the relay's
/// `--witness-key`).
fn trusted_witnesses(args: &ReplayArgs, own: Option<[u8; 32]>) -> Result<Vec<[u8; 32]>, Failure> {
    let mut keys = Vec::new();
    for k in &args.trust_witness {
        let key = bsor_stream::integrity::from_hex(k)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .filter(|b| bsor_stream::integrity::VerifyingKey::from_bytes(b).is_ok())
            .ok_or_else(|| {
                Failure(format!(
                    "--trust-witness {k}: not an Ed25519 public key (64 hex digits)"
                ))
            })?;
        keys.push(key);
    }
    keys.extend(own);
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// TLS and browser settings of `serve`.
pub struct Exposure<'a> {
    /// Certificate chain and key (PEM) for TLS on both listeners.
    pub tls: Option<(&'a Path, &'a Path)>,
    /// Origins whose pages may connect over WebSocket (empty: the same host only).
    pub allowed_origins: Vec<String>,
    /// The witness key file (`keygen`'s), if the relay witnesses.
    pub witness_key: Option<&'a Path>,
    /// The folder of map zips served as `GET /maps/HASH.zip`.
    pub maps: Option<&'a Path>,
    /// The mirror maps not in the folder are fetched from (`{hash}` in it).
    pub map_url: Option<&'a str>,
    /// The CAs an https mirror must be certified by.
    pub map_url_ca: Option<&'a Path>,
    /// The cluster to join, if any.
    pub cluster: &'a ClusterArgs,
}

/// Relays sharing sessions through NATS JetStream (`wire.md` §5).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ClusterArgs {
    /// Join the relays sharing sessions through these NATS servers with JetStream
    /// (`nats://HOST:PORT`, comma-separated, any of one cluster): any relay then serves
    /// any session, and a publisher or viewer may move between them (wire.md §5). With
    /// --store, finished sessions are archived into it (by one relay of those given one)
    /// and then purged from JetStream.
    #[arg(long, value_name = "URLS", conflicts_with = "archive")]
    pub cluster: Option<String>,
    /// Replicas of the cluster's streams and bucket (3 for a three-node NATS cluster).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "cluster")]
    pub cluster_replicas: usize,
    /// Sessions the cluster holds at most (live, or ended and not yet archived or aged out
    /// after 24 h); a publisher of a new session past it gets OverBudget. All relays of a
    /// cluster give the same (the last relay started sets it).
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "cluster",
          value_parser = clap::value_parser!(i64).range(1..))]
    pub cluster_max_sessions: i64,
    /// Seconds a finished session stays in JetStream, for late viewers, before it is
    /// archived into --store.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, requires = "cluster",
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub cluster_keep_finished: u64,
}

/// `serve --tcp ADDR [--ws ADDR] [--archive DIR] --token-file FILE [--tls-cert PEM --tls-key
/// PEM] [--allow-origin ORIGIN]... [--maps DIR]`: prints `listening tcp=ADDR[ ws=ADDR]` (the bound
/// addresses) when ready, runs until Ctrl-C or SIGTERM, then finishes the archive files.
/// SIGHUP re-reads the token file.
pub fn serve(
    tcp_addr: &str,
    ws_addr: Option<&str>,
    archive: Option<&Path>,
    token_file: &Path,
    exposure: Exposure<'_>,
    budgets: &Budgets,
    replays: &ReplayArgs,
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
    warn_unusable(&tokens, token_file);
    let tls = match exposure.tls {
        Some((cert, key)) => {
            Some(tls::server_config(cert, key).map_err(|e| Failure(e.to_string()))?)
        }
        None => None,
    };
    let witness = match exposure.witness_key {
        Some(path) => Some(bsor_stream::integrity::witness::Witness::new(
            super::integrity::load_key(path)?,
        )),
        None => None,
    };
    if let Some(dir) = exposure.maps {
        if !dir.is_dir() {
            return Err(Failure(format!("--maps {}: not a folder", dir.display())));
        }
    }
    let mirror = match exposure.map_url {
        Some(url) => {
            let tls = match exposure.map_url_ca {
                Some(ca) => Some(tls::client_config(ca).map_err(|e| Failure(e.to_string()))?),
                None => None,
            };
            Some(
                bsor_stream::net::http::mirror::Mirror::new(url, tls)
                    .map_err(|e| Failure(e.to_string()))?,
            )
        }
        None => None,
    };
    // Before any port is bound: a bad key is the command line's error.
    let trusted = trusted_witnesses(replays, witness.as_ref().map(|w| w.public_key()))?;
    let name = server_name(replays, ws_addr)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    runtime.block_on(async {
        let bind = |addr: String| async move {
            let l = listen(&addr)
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
        // With an archive and a store, each session that finishes whole goes into the store.
        let (finished_tx, finished_rx) = match (archive, &replays.store) {
            (Some(_), Some(_)) => {
                let (tx, rx) = tokio::sync::mpsc::channel(FINISHED_QUEUE);
                (Some(tx), Some(rx))
            }
            _ => (None, None),
        };
        let cluster = match &exposure.cluster.cluster {
            Some(urls) => {
                let config = bsor_stream::net::cluster::ClusterConfig {
                    urls: urls
                        .split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        .map(str::to_string)
                        .collect(),
                    replicas: exposure.cluster.cluster_replicas.max(1),
                    max_sessions: exposure.cluster.cluster_max_sessions,
                    keep_finished: std::time::Duration::from_secs(
                        exposure.cluster.cluster_keep_finished,
                    ),
                    ..Default::default()
                };
                let c = bsor_stream::net::cluster::Cluster::connect(config)
                    .await
                    .map_err(|e| Failure(format!("--cluster {urls}: {e}")))?;
                tracing::info!(nats = %urls, "sharing sessions through NATS JetStream");
                Some(c)
            }
            None => None,
        };
        let config = ServerConfig {
            archive: archive.map(Path::to_path_buf),
            cluster: cluster.clone(),
            max_connections: budgets.max_connections,
            max_handshakes: budgets.max_handshakes,
            finished: finished_tx,
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
        if let Some(w) = witness {
            // The public key only: the secret is never logged.
            let key = bsor_stream::integrity::hex(&w.public_key());
            tracing::info!(witness_key = %key, "witnessing checkpoints");
            server.set_witness(w);
        }
        let replay_server = match &replays.store {
            Some(location) => {
                let maps = exposure.maps.map(Path::to_path_buf);
                let opened = open_replays(
                    location,
                    replays,
                    &text,
                    trusted.clone(),
                    name.clone(),
                    maps,
                );
                Some(opened.await?)
            }
            None => None,
        };
        if let (Some(srv), Some(rx)) = (&replay_server, finished_rx) {
            tokio::spawn(store_finished(srv.clone(), rx));
        }
        if let (Some(srv), Some(c)) = (&replay_server, &cluster) {
            c.archive_into(std::sync::Arc::new(ClusterArchive(srv.clone())));
        }
        // Before the `listening` line: from then on a signal finds its handler.
        let mut signals = Signals::new().map_err(|e| Failure(format!("signals: {e}")))?;
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
                let mut page = crate::assets::web();
                if let Some(dir) = exposure.maps {
                    page = page.with_maps(dir);
                }
                if let Some(m) = mirror {
                    page = page.with_map_mirror(m);
                }
                if let Some(r) = &replay_server {
                    page = page.with_mount(std::sync::Arc::new(
                        bsor_stream::server::http::Routes::new(r.clone()),
                    ));
                }
                tasks.push(tokio::spawn(ws::serve_site(
                    l,
                    server.clone(),
                    options,
                    page,
                )));
                println!("listening tcp={tcp_bound} ws={ws_bound}");
            }
            None => println!("listening tcp={tcp_bound}"),
        }
        let tls = tls.is_some();
        tracing::info!(%tcp_bound, ws = ?ws_addr, tls, archive = ?archive, "relay ready");
        loop {
            match signals.next().await {
                Signal::Reload => {
                    reload(&server, token_file);
                    if let (Some(r), Ok(text)) =
                        (&replay_server, std::fs::read_to_string(token_file))
                    {
                        r.set_uploaders(Uploaders::parse(&text));
                    }
                }
                Signal::Stop(name) => {
                    tracing::info!("{name}: stopping, finishing the archives");
                    break;
                }
            }
        }
        for t in tasks {
            t.abort();
        }
        server
            .shutdown()
            .map_err(|e| Failure(format!("finishing the archive: {e}")))?;
        Ok(Outcome::Done)
    })
}

/// Finished sessions waiting to be stored; one more is logged and left in the archive.
const FINISHED_QUEUE: usize = 256;

/// Stores each finished session's archive as a replay (`http.md` §8.12), one at a time; the
/// archive file stays where it is (the relay still serves it). A failure is logged with
/// the session's file; the file can be uploaded later with `POST /replays`.
async fn store_finished(
    srv: std::sync::Arc<ReplayServer>,
    mut rx: tokio::sync::mpsc::Receiver<bsor_stream::net::server::Finished>,
) {
    while let Some(finished) = rx.recv().await {
        let path = finished.path;
        let file = path.display().to_string();
        let bytes = match tokio::fs::metadata(&path).await {
            Ok(m) if m.len() > srv.config.max_body => {
                tracing::warn!(%file, bytes = m.len(), "a finished session is over the upload limit; not stored");
                continue;
            }
            Ok(_) => tokio::fs::read(&path).await,
            Err(e) => Err(e),
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(%file, err = %e, "reading a finished session");
                continue;
            }
        };
        let witness = read_witness(&path).await;
        match srv
            .store_session(&bytes, witness.as_deref(), finished.player.as_deref())
            .await
        {
            Ok(done) => {
                let (r, created) = match &done {
                    server::Uploaded::Created(r) => (r, true),
                    server::Uploaded::Existing(r) => (r, false),
                };
                tracing::info!(%file, id = %r.id, player = %r.player, created, "finished session stored");
            }
            Err(e) if e.code == "not-granted" => {
                // The header names a player the publisher's token does not grant: the
                // session stays in the archive, and is no one's replay.
                tracing::warn!(%file, reason = %e.reason, "a finished session was not stored: its publisher may not store it as its header's player's replay; archived only")
            }
            Err(e) => {
                tracing::warn!(%file, cause = ?e.cause, code = e.code, reason = %e.reason, "a finished session was not stored")
            }
        }
    }
}

/// The replay server as the store a cluster's finished sessions are archived into
/// (`http.md` §8.12, as a finished session of a relay's archive).
struct ClusterArchive(std::sync::Arc<ReplayServer>);

impl bsor_stream::net::cluster::SessionStore for ClusterArchive {
    fn max_bytes(&self) -> u64 {
        self.0.config.max_body
    }

    fn store(
        &self,
        s: bsor_stream::net::cluster::FinishedSession,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = bsor_stream::net::cluster::Filed> + Send + '_>,
    > {
        use bsor_stream::net::cluster::Filed;
        Box::pin(async move {
            let stored = self
                .0
                .store_session(&s.stream, s.witness.as_deref(), s.player.as_deref())
                .await;
            match stored {
                Ok(server::Uploaded::Created(r) | server::Uploaded::Existing(r)) => {
                    Filed::Stored(r.id.to_string())
                }
                Err(e) => {
                    let why = format!("{} ({})", e.reason, e.code);
                    match e.cause {
                        server::Cause::Internal
                        | server::Cause::Unavailable
                        | server::Cause::RateLimited
                        | server::Cause::TooSlow => Filed::Failed(why),
                        _ => Filed::Refused(why),
                    }
                }
            }
        })
    }
}

/// The most bytes of a finished session's `.witness` sibling read (100,000 statements, far
/// more than a session's checkpoints); a larger one is logged and left out.
const MAX_WITNESS_FILE: u64 = 100_000 * 162;

/// The `.witness` sibling of a finished session's archive (`integrity.md` §12.2), if there
/// is one that can be read.
async fn read_witness(archive: &Path) -> Option<Vec<u8>> {
    let path = archive.with_extension("witness");
    let file = path.display().to_string();
    match tokio::fs::metadata(&path).await {
        Ok(m) if m.len() > MAX_WITNESS_FILE => {
            tracing::warn!(%file, bytes = m.len(), "a witness file over the limit; left out");
            None
        }
        Ok(_) => match tokio::fs::read(&path).await {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::warn!(%file, err = %e, "reading a witness file");
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(%file, err = %e, "reading a witness file");
            None
        }
    }
}

/// Opens the replay server and starts its sweeper (every `--sweep-seconds`, 30 by default,
/// 1,000 expired leases at most each time).
async fn open_replays(
    location: &str,
    args: &ReplayArgs,
    tokens: &str,
    trusted_witnesses: Vec<[u8; 32]>,
    server_name: String,
    maps: Option<std::path::PathBuf>,
) -> Result<std::sync::Arc<ReplayServer>, Failure> {
    let key = match &args.server_key {
        Some(path) => Some(super::integrity::load_key(path)?),
        None => None,
    };
    let config = server::Config {
        key,
        profile: if args.store_compact {
            Profile::Compact
        } else {
            Profile::Lossless
        },
        lease: std::time::Duration::from_secs(args.lease_seconds.unwrap_or(600)),
        trusted_witnesses,
        server_name,
        maps,
        caps: if args.no_address_caps {
            server::admission::Caps::default().without_address_caps()
        } else {
            server::admission::Caps::default()
        },
        address_rate: if args.no_address_caps {
            0
        } else {
            server::Config::default().address_rate
        },
        ..server::Config::default()
    };
    let every = std::time::Duration::from_secs(args.sweep_seconds.unwrap_or(30));
    let uploaders = Uploaders::parse(tokens);
    let srv = ReplayServer::open(location, args.index.as_deref(), config, uploaders)
        .await
        .map_err(|e| Failure(format!("the replay store: {e}")))?;
    tracing::info!(store = %srv.store.location(), index = %srv.index.url(), "replay server ready");
    let sweeper = srv.clone();
    tokio::spawn(async move {
        loop {
            match sweeper.sweep(1000).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "swept blobs of expired leases"),
                Err(e) => tracing::warn!(err = %e.reason, "sweeping leases"),
            }
            tokio::time::sleep(every).await;
        }
    });
    Ok(srv)
}

/// Says which lines of the token file can never match.
fn warn_unusable(tokens: &Tokens, file: &Path) {
    if tokens.unusable() > 0 {
        tracing::warn!(
            file = %file.display(),
            lines = tokens.unusable(),
            "token file lines with an empty token or one over 256 bytes never match"
        );
    }
}

/// SIGHUP: the token file read again. A file that cannot be read, or holds no usable
/// token, keeps the tokens in force (a half-written file must not lock every publisher out).
fn reload(server: &Server, file: &Path) {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) => {
            tracing::warn!(file = %file.display(), %err, "SIGHUP: cannot read the token file; keeping the old tokens");
            return;
        }
    };
    let tokens = Tokens::parse(&text);
    warn_unusable(&tokens, file);
    if tokens.is_empty() {
        tracing::warn!(file = %file.display(), "SIGHUP: the token file holds no token; keeping the old tokens");
        return;
    }
    tracing::info!(file = %file.display(), tokens = tokens.len(), "SIGHUP: token file re-read");
    server.set_tokens(tokens);
}

/// What a signal asks of the relay.
enum Signal {
    /// Re-read the token file.
    Reload,
    /// Stop (named for the log).
    Stop(&'static str),
}

/// The signals `serve` handles, registered once.
struct Signals {
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    #[cfg(not(unix))]
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    #[cfg(unix)]
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.hup.recv() => Signal::Reload,
            _ = self.int.recv() => Signal::Stop("Ctrl-C"),
            _ = self.term.recv() => Signal::Stop("SIGTERM"),
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> Signal {
        let _ = tokio::signal::ctrl_c().await;
        Signal::Stop("Ctrl-C")
    }
}

/// Connections waiting to be accepted: as many as Linux takes by default
/// (`net.core.somaxconn`), not tokio's 1,024. Hundreds of publishers and thousands of
/// viewers connecting at once (a tournament's start) otherwise overflow the queue, and
/// each connection dropped waits a second for TCP to send its SYN again.
const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`], as `TcpListener::bind` makes one
/// otherwise: the first of its addresses that binds, `SO_REUSEADDR` on Unix.
async fn listen(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = std::io::Error::other("the name has no address");
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(last)
}
