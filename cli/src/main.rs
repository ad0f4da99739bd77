//! `bsor-stream`: the command-line tool. It parses arguments, reads and writes files and
//! prints; everything it computes is in the library.

mod assets;
mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use commands::{Failure, Outcome};

#[derive(Parser)]
#[command(
    name = "bsor-stream",
    version,
    about = "Beat Saber replays: classic BSOR and the chunked BSOR stream format"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where `publish` takes its credential (a token from the relay's token file) from: one of
/// these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct TokenArgs {
    /// Read the token from the first line of FILE.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Read the token from the environment variable VAR.
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// The token itself: it shows in the process list to every user of the machine, so
    /// prefer --token-file or --token-env (a warning says so).
    #[arg(long)]
    token: Option<String>,
}

impl TokenArgs {
    fn source(self) -> commands::live::TokenSource {
        use commands::live::TokenSource;
        match (self.token_file, self.token_env, self.token) {
            (Some(f), _, _) => TokenSource::File(f),
            (_, Some(v), _) => TokenSource::Env(v),
            (_, _, t) => TokenSource::Arg(t.unwrap_or_default()),
        }
    }
}

/// Frame coding profile.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProfileArg {
    /// Bit-exact: rebuilds the BSOR byte for byte.
    Lossless,
    /// Positions within 0.1 mm, rotations within 0.02°.
    Fine,
    /// Positions within 1 mm, rotations within 0.2°.
    Compact,
    /// Lossy with --position-step-mm and --rotation-step-deg: positions within step/1.153,
    /// rotations within 0.89 rotation steps.
    Custom,
}

/// Stream settings shared by `encode`.
#[derive(Args, Debug, Clone)]
struct StreamArgs {
    /// Frame coding profile.
    #[arg(long, value_enum, default_value = "lossless")]
    profile: ProfileArg,
    /// Seconds of song time between keyframes (default: 1, or 10 with --archive).
    #[arg(long)]
    keyframe_interval: Option<f32>,
    /// Seconds of song time between chunk flushes within a keyframe group (default: 0.1,
    /// or none with --archive; 0 means none).
    #[arg(long)]
    flush_interval: Option<f32>,
    /// Archive settings: a keyframe every 10 s, no flushes in between.
    #[arg(long)]
    archive: bool,
    /// With --profile custom: the position step in millimetres (0.01 to 50).
    #[arg(long, value_name = "MM", requires = "rotation_step_deg")]
    position_step_mm: Option<f64>,
    /// With --profile custom: the rotation step in degrees, the angle between neighbouring
    /// grid rotations (about 0.00008 to 2.2; fine's is 0.0225, compact's 0.225).
    #[arg(long, value_name = "DEG", requires = "position_step_mm")]
    rotation_step_deg: Option<f64>,
}

/// TLS for `publish` and `watch`.
#[derive(Args, Debug, Clone)]
struct TlsArgs {
    /// Connect over TLS (`wss://` with --ws), trusting only the certificates in --ca-file.
    #[arg(long, requires = "ca_file")]
    tls: bool,
    /// The certificates to trust (PEM: a CA, or the relay's own); no system store is used.
    #[arg(long, value_name = "PEM", requires = "tls")]
    ca_file: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Summarize a replay (classic BSOR or stream, detected by its magic): player, song,
    /// score, duration, frame rate, counts per section.
    Info {
        /// A `.bsor` or `.bsors` file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also the HUD at this song time (seconds; repeatable): score, combo, misses and
        /// bombs from the events up to it (`at` lines, or `"at"` in JSON).
        #[arg(long = "at", value_name = "SECONDS")]
        at: Vec<f64>,
    },
    /// Write the whole replay as JSON to stdout (non-finite floats as "NaN", "Infinity",
    /// "-Infinity"; user data and trailing bytes as hex).
    Export {
        /// A `.bsor` or `.bsors` file.
        file: PathBuf,
    },
    /// Print the play's event digest as hex, the same in every format and profile
    /// (proto-spec/integrity.md §11); with --json also its motion signature.
    Fingerprint {
        /// A `.bsor` or `.bsors` file.
        file: PathBuf,
        /// Print one JSON object with the digest and the motion signature.
        #[arg(long)]
        json: bool,
    },
    /// Compare two plays' motion and timing: the score, the threshold, the verdict (same
    /// play / different play) and whether the event digests are equal. Exits 0 for the same
    /// play, 1 for a different one.
    Similar {
        /// A `.bsor` or `.bsors` file.
        a: PathBuf,
        /// Another.
        b: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a synthetic replay (smooth motion, notes, bombs, walls, heights, a pause).
    Synth {
        /// Where to write it.
        #[arg(short, long, default_value = "synthetic.bsor")]
        output: PathBuf,
        /// Song length in seconds.
        #[arg(long, default_value_t = 60.0)]
        seconds: f32,
        /// Frames per second.
        #[arg(long, default_value_t = 90)]
        fps: u32,
        /// Seed of the generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Notes a second, about (0.1 to 20; a dense Expert+ map has 8 to 12).
        #[arg(long, default_value_t = 2.0)]
        notes_per_second: f32,
    },
    /// Import a legacy ScoreSaber replay JSON document (what each BSOR field is filled
    /// from: proto-spec/legacy-import.md) or an XROR recording (the BOXRR-23 data set's
    /// format) as a BSOR, or as a lossless `.bsors` when the output's name ends in `.bsors`.
    Import {
        /// The legacy `.json` document or the `.xror` recording.
        input: PathBuf,
        /// Where to write the BSOR (or `.bsors`).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Transcode a classic BSOR into the stream format (`-` for stdin or stdout): a file's
    /// events go out with the first chunk after their song time; from stdin the stream comes
    /// as the bytes arrive, the events after the frames.
    Encode {
        /// The BSOR input, or `-`.
        input: PathBuf,
        /// The `.bsors` output, or `-`.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        stream: StreamArgs,
        /// Sign the stream with this secret key file (from `keygen`; lossless only, input a
        /// file).
        #[arg(long, value_name = "KEYFILE")]
        key: Option<PathBuf>,
    },
    /// Write a new signing key (mode 0600, never over an existing file) and print its public
    /// key as hex.
    Keygen {
        /// The secret key file to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Sign a BSOR or a complete stream into a signed lossless `.bsors`. A signature proves
    /// only that the key's holder signed the records, not who played them.
    Sign {
        /// A `.bsor` or `.bsors` file.
        input: PathBuf,
        /// The secret key file.
        #[arg(long, value_name = "KEYFILE")]
        key: PathBuf,
        /// The signed `.bsors` output.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        stream: StreamArgs,
    },
    /// Rebuild a classic BSOR from a stream. Exits 2 when only part could be recovered.
    Decode {
        /// The `.bsors` input, or `-`.
        input: PathBuf,
        /// The `.bsor` output, or `-`.
        #[arg(short, long)]
        output: PathBuf,
        /// Start of the span to keep, in seconds of song time.
        #[arg(long)]
        from: Option<f32>,
        /// End of the span to keep, in seconds of song time.
        #[arg(long)]
        to: Option<f32>,
        /// Keep reading a file that is still being written, until its stream ends.
        #[arg(long)]
        follow: bool,
    },
    /// List the events of a stream without decoding any pose data.
    Events {
        /// A `.bsors` file.
        file: PathBuf,
        /// Print the events as JSON.
        #[arg(long)]
        json: bool,
    },
    /// For each BSOR file and profile: encode, decode, and report size and accuracy. Exits 1
    /// when lossless is not exact, events are not exact, or a lossy bound is broken.
    /// With --signatures: check a stream's signatures; exits 0 valid, 1 invalid or
    /// unsigned, 2 valid but incomplete.
    Verify {
        /// BSOR files (with --signatures: one stream).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Check the signatures of a stream (proto-spec/integrity.md) instead.
        #[arg(long, conflicts_with = "archive")]
        signatures: bool,
        /// With --signatures: a witness's public key (hex) to trust; repeatable.
        #[arg(long, value_name = "PUBHEX", requires = "signatures")]
        witness_key: Vec<String>,
        /// With --signatures: the witness statements (default: FILE's `.witness` sibling).
        #[arg(long, value_name = "FILE.witness", requires = "signatures")]
        witnesses: Option<PathBuf>,
        /// Use the archive settings instead of the live ones.
        #[arg(long)]
        archive: bool,
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
        /// Also check a custom profile with this position step (mm; with --rotation-step-deg).
        #[arg(long, value_name = "MM", requires = "rotation_step_deg")]
        position_step_mm: Option<f64>,
        /// The custom profile's rotation step in degrees (with --position-step-mm).
        #[arg(long, value_name = "DEG", requires = "position_step_mm")]
        rotation_step_deg: Option<f64>,
    },
    /// Run the live relay over TCP and optionally WebSocket (prints `listening tcp=ADDR`,
    /// and ` ws=ADDR`, when ready; Ctrl-C or SIGTERM stops it and finishes the archive;
    /// SIGHUP re-reads the token file).
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:0 for any free port.
        #[arg(long)]
        tcp: String,
        /// Also serve WebSocket clients (`ws://ADDR/`) on this address.
        #[arg(long)]
        ws: Option<String>,
        /// Write each session to DIR/SESSION.bsors as it arrives.
        #[arg(long, value_name = "DIR")]
        archive: Option<PathBuf>,
        /// Credentials: one a line, `TOKEN` for any session or `SESSION:TOKEN` for one.
        /// Read again on SIGHUP (an unreadable or empty file keeps the tokens in force).
        #[arg(long)]
        token_file: PathBuf,
        /// Serve TLS on both listeners (`wss://` for WebSocket) with this certificate chain
        /// (PEM, the relay's certificate first).
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// A web page origin (`https://host[:port]`) allowed to connect over WebSocket;
        /// repeatable; `*` allows any. Default: only pages from the host and port the
        /// browser reached the relay at. Clients that send no Origin are always accepted.
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// Witness what is published with this key (from `keygen`): countersign each
        /// checkpoint with its receive time, to the publisher, the viewers and
        /// DIR/SESSION.witness (proto-spec/integrity.md §12).
        #[arg(long, value_name = "FILE")]
        witness_key: Option<PathBuf>,
        /// Serve the maps in DIR (`DIR/HASH.zip`, BeatSaver zips named by their hash) as
        /// `GET /maps/HASH.zip` on the WebSocket address, for the player to show a replay's
        /// map and play its song.
        #[arg(long, value_name = "DIR", requires = "ws")]
        maps: Option<PathBuf>,
        /// Fetch a map not in --maps DIR from this mirror (`http://` or `https://`, `{hash}`
        /// standing for the hash in lowercase) and keep it there.
        #[arg(long, value_name = "TEMPLATE", requires = "maps")]
        map_url: Option<String>,
        /// The CAs an https --map-url must be certified by (PEM).
        #[arg(long, value_name = "PEM", requires = "map_url")]
        map_url_ca: Option<PathBuf>,
        #[command(flatten)]
        cluster: commands::serve::ClusterArgs,
        #[command(flatten)]
        budgets: commands::serve::Budgets,
        #[command(flatten)]
        replays: Box<commands::serve::ReplayArgs>,
    },
    /// Send a replay to a relay as a recorder would (a `.bsor` is encoded live with the
    /// profile; a `.bsors` is sent as it is), resuming after a lost connection.
    Publish {
        /// A `.bsor` or `.bsors` file.
        file: PathBuf,
        /// The relay's address (TCP, or WebSocket with --ws).
        #[arg(long)]
        to: String,
        /// Connect over WebSocket (`ws://ADDR/`).
        #[arg(long)]
        ws: bool,
        #[command(flatten)]
        tls: TlsArgs,
        /// The session's name.
        #[arg(long)]
        session: String,
        #[command(flatten)]
        token: TokenArgs,
        /// Times the song's speed (0: as fast as possible).
        #[arg(long, default_value_t = 1.0)]
        speed: f32,
        /// Frame coding profile for a `.bsor`.
        #[arg(long, value_enum, default_value = "lossless")]
        profile: ProfileArg,
        /// Sign a `.bsor` as it is sent with this secret key file (lossless only).
        #[arg(long, value_name = "KEYFILE")]
        key: Option<PathBuf>,
    },
    /// Watch a session: progress on stderr; with -o, every chunk into a `.bsors` file.
    /// Exits 0 when the stream ended (and, in complete mode, arrived whole).
    ///
    /// The progress line shows the frames received a second (fps), the publisher's pace
    /// (song seconds a second, estimated from the stream over the last 20 s: `publish
    /// --speed 4` shows 4.0x) and the latency: how far behind the live edge a frame arrives,
    /// the edge being the line at that pace through the best-placed chunk of the last 20 s.
    /// About a flush interval for a chunk's first frame and 0 for its last when nothing
    /// holds chunks back; a delay that never changes cannot be seen (no common clock).
    Watch {
        /// The relay's address (TCP, or WebSocket with --ws).
        addr: String,
        /// Connect over WebSocket (`ws://ADDR/`).
        #[arg(long)]
        ws: bool,
        #[command(flatten)]
        tls: TlsArgs,
        /// The session's name.
        #[arg(long)]
        session: String,
        /// Ask for every chunk instead of the live edge (implied by -o).
        #[arg(long)]
        complete: bool,
        /// Seconds to wait for a session that has not started.
        #[arg(long, default_value_t = 30.0)]
        wait: f32,
        /// Write what arrives here (and the relay's witness statements, if any, into its
        /// `.witness` sibling, as a relay's archive keeps them).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// A relay, a publisher and three viewers on 127.0.0.1 in one process (a synthetic
    /// 20-second replay when no file is given): what a viewer sees, and the sizes; prints
    /// the URL of the browser player showing the session.
    Demo {
        /// A `.bsor` or `.bsors` file.
        file: Option<PathBuf>,
        /// Times the song's speed.
        #[arg(long, default_value_t = 2.0)]
        speed: f32,
        /// Exit when the song ends (by default, run from a terminal, the page keeps
        /// serving the replay until Ctrl-C; `BSOR_DEMO_EXIT=1` does the same as this).
        #[arg(long)]
        exit: bool,
    },
    /// A replay server's key registry (proto-spec/http.md §8.13).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Sizes and speeds of every profile under both settings, against BSOR and zstd -19.
    Bench {
        /// BSOR files or folders of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print JSON instead of a table (with --report: write DIR/report.json too).
        #[arg(long)]
        json: bool,
        /// Write a report to this folder instead: index.html with plots against general
        /// compressors and a .butter-style baseline, and the plots as SVG files.
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
        /// With --report: the keyframe intervals (seconds) the sweep tries.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0.25,0.5,1,2,5,10,30",
            requires = "report"
        )]
        sweep: Vec<f32>,
    },
}

/// What `keys` does.
#[derive(Subcommand)]
enum KeysCommand {
    /// Register the public key of a secret key file (as `keygen` writes it) to the token's
    /// player, proving possession: the server's challenge, signed with the key over the
    /// player's ID and the server's name.
    Register {
        /// The secret key file (64 hex digits, as `keygen` writes it).
        #[arg(long, value_name = "KEYFILE")]
        key: PathBuf,
        /// The replay server: `http://HOST[:PORT]` or `https://HOST[:PORT]`.
        #[arg(long, value_name = "URL")]
        server: String,
        /// The player's upload token: the first line of this file.
        #[arg(long, value_name = "FILE")]
        token_file: PathBuf,
        /// The server's name the proof names (its `serve --server-name`); default the
        /// URL's host. A server that names itself otherwise is refused.
        #[arg(long, value_name = "NAME")]
        server_name: Option<String>,
        /// With https: the certificates to trust (PEM: a CA, or the server's own).
        #[arg(long, value_name = "PEM")]
        ca_file: Option<PathBuf>,
    },
}

fn run(cli: Cli) -> Result<Outcome, Failure> {
    match cli.command {
        Command::Info { file, json, at } => commands::classic::info(&file, json, &at),
        Command::Export { file } => commands::classic::export(&file),
        Command::Fingerprint { file, json } => commands::fingerprint::fingerprint(&file, json),
        Command::Similar { a, b, json } => commands::fingerprint::similar(&a, &b, json),
        Command::Synth {
            output,
            seconds,
            fps,
            seed,
            notes_per_second,
        } => commands::classic::synth(&output, seconds, fps, seed, notes_per_second),
        Command::Import { input, output } => commands::import::import(&input, &output),
        Command::Encode {
            input,
            output,
            stream,
            key: Some(key),
        } => commands::integrity::encode_signed(&input, &key, &output, stream.settings()?),
        Command::Encode {
            input,
            output,
            stream,
            key: None,
        } => commands::stream::encode(&input, &output, stream.settings()?),
        Command::Keygen { output } => commands::integrity::keygen(&output),
        Command::Keys {
            command:
                KeysCommand::Register {
                    key,
                    server,
                    token_file,
                    server_name,
                    ca_file,
                },
        } => commands::keys::register(
            &key,
            &server,
            &token_file,
            server_name.as_deref(),
            ca_file.as_deref(),
        ),
        Command::Sign {
            input,
            key,
            output,
            stream,
        } => commands::integrity::sign(&input, &key, &output, stream.settings()?),
        Command::Decode {
            input,
            output,
            from,
            to,
            follow,
        } => commands::stream::decode(&input, &output, from, to, follow),
        Command::Events { file, json } => commands::stream::events(&file, json),
        Command::Verify {
            files,
            signatures: true,
            json,
            witness_key,
            witnesses,
            ..
        } => match files.as_slice() {
            [file] => {
                let w = commands::integrity::WitnessArgs {
                    trusted: witness_key,
                    file: witnesses,
                };
                commands::integrity::verify_signatures(file, json, &w)
            }
            _ => Err(commands::Failure(
                "verify --signatures takes one stream".into(),
            )),
        },
        Command::Verify {
            files,
            archive,
            json,
            position_step_mm,
            rotation_step_deg,
            ..
        } => {
            let custom = match (position_step_mm, rotation_step_deg) {
                (Some(mm), Some(deg)) => Some(
                    bsor_stream::stream::CustomSteps::from_mm_deg(mm, deg)
                        .map_err(|e| commands::Failure(format!("verify: {e}")))?,
                ),
                _ => None,
            };
            commands::verify::verify(&files, archive, json, custom)
        }
        Command::Bench {
            paths,
            json,
            report: Some(dir),
            sweep,
        } => commands::report::run(&commands::report::Options {
            paths: &paths,
            dir: &dir,
            json,
            sweep: &sweep,
        }),
        Command::Bench { paths, json, .. } => commands::verify::bench(&paths, json),
        Command::Serve {
            tcp,
            ws,
            archive,
            token_file,
            tls_cert,
            tls_key,
            allow_origin,
            witness_key,
            maps,
            map_url,
            map_url_ca,
            cluster,
            budgets,
            replays,
        } => {
            let exposure = commands::serve::Exposure {
                cluster: &cluster,
                tls: tls_cert.as_deref().zip(tls_key.as_deref()),
                allowed_origins: allow_origin,
                witness_key: witness_key.as_deref(),
                maps: maps.as_deref(),
                map_url: map_url.as_deref(),
                map_url_ca: map_url_ca.as_deref(),
            };
            commands::serve::serve(
                &tcp,
                ws.as_deref(),
                archive.as_deref(),
                &token_file,
                exposure,
                &budgets,
                &replays,
            )
        }
        Command::Demo { file, speed, exit } => commands::live::demo(file.as_deref(), speed, exit),
        Command::Publish {
            file,
            to,
            ws,
            tls,
            session,
            token,
            speed,
            profile,
            key,
        } => {
            let settings = StreamArgs {
                profile,
                keyframe_interval: None,
                flush_interval: None,
                archive: false,
                position_step_mm: None,
                rotation_step_deg: None,
            }
            .settings()?;
            let token = commands::live::read_token(token.source())?;
            let relay = commands::live::RelayAt {
                addr: &to,
                websocket: ws,
                ca_file: tls.ca_file.as_deref(),
            };
            commands::live::publish(
                &file,
                &relay,
                &session,
                &token,
                speed,
                settings,
                key.as_deref(),
            )
        }
        Command::Watch {
            addr,
            ws,
            tls,
            session,
            complete,
            wait,
            output,
        } => {
            let relay = commands::live::RelayAt {
                addr: &addr,
                websocket: ws,
                ca_file: tls.ca_file.as_deref(),
            };
            commands::live::watch(&relay, &session, complete, wait, output.as_deref())
        }
    }
}

impl StreamArgs {
    fn settings(&self) -> Result<bsor_stream::stream::Settings, commands::Failure> {
        use bsor_stream::stream::{CustomSteps, Profile, Settings};
        let profile = match (self.profile, self.position_step_mm, self.rotation_step_deg) {
            (ProfileArg::Custom, Some(mm), Some(deg)) => Profile::Custom(
                CustomSteps::from_mm_deg(mm, deg)
                    .map_err(|e| commands::Failure(format!("--profile custom: {e}")))?,
            ),
            (ProfileArg::Custom, ..) => {
                return Err(commands::Failure(
                    "--profile custom needs --position-step-mm and --rotation-step-deg".into(),
                ))
            }
            (_, Some(_), _) | (_, _, Some(_)) => {
                return Err(commands::Failure(
                    "--position-step-mm and --rotation-step-deg go with --profile custom".into(),
                ))
            }
            (ProfileArg::Lossless, ..) => Profile::Lossless,
            (ProfileArg::Fine, ..) => Profile::Fine,
            (ProfileArg::Compact, ..) => Profile::Compact,
        };
        let mut s = if self.archive {
            Settings::archive(profile)
        } else {
            Settings::live(profile)
        };
        if let Some(k) = self.keyframe_interval {
            s.keyframe_seconds = k;
        }
        if let Some(f) = self.flush_interval {
            s.flush_seconds = f;
        }
        Ok(s)
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Partial) => ExitCode::from(2),
        Ok(Outcome::Failed) => ExitCode::FAILURE,
        Err(Failure(msg)) if msg.is_empty() => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("bsor-stream: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
