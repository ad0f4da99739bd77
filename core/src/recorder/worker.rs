//! The background thread: drains the ring, encodes, feeds the sinks.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::bsor::Info;
use crate::stream::StreamEncoder;

use super::classic::ClassicSink;
#[cfg(feature = "live")]
use super::live::LiveSink;
use super::{Config, Ending, LogLevel, MaybeSigner, Record, Shared, SinkKind, SinkState};

/// The `.bsors` file sink.
struct StreamFile {
    file: File,
    sync: bool,
}

impl StreamFile {
    fn create(path: &Path, sync: bool) -> std::io::Result<Self> {
        Ok(StreamFile {
            file: File::create(path)?,
            sync,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// The sinks that still work; a failed one is dropped (and reported).
struct Sinks {
    file: Option<StreamFile>,
    #[cfg(feature = "live")]
    live: Option<LiveSink>,
    classic: Option<ClassicSink>,
}

impl Sinks {
    fn open(config: &Config, shared: &Arc<Shared>) -> Sinks {
        let file = config.stream_file.as_deref().and_then(|p| {
            match StreamFile::create(p, config.sync_each_chunk) {
                Ok(f) => {
                    shared.set_sink(SinkKind::StreamFile, SinkState::Running);
                    Some(f)
                }
                Err(e) => {
                    shared.fail(SinkKind::StreamFile, format!("{}: {e}", p.display()));
                    None
                }
            }
        });
        let classic = config
            .classic_file
            .as_deref()
            .and_then(|p| match ClassicSink::create(p) {
                Ok(c) => {
                    shared.set_sink(SinkKind::Classic, SinkState::Running);
                    Some(c)
                }
                Err(e) => {
                    shared.fail(SinkKind::Classic, format!("{}: {e}", p.display()));
                    None
                }
            });
        #[cfg(feature = "live")]
        let live = config.live.clone().map(|l| {
            shared.set_sink(SinkKind::Live, SinkState::Connecting);
            LiveSink::start(l, Arc::clone(shared))
        });
        Sinks {
            file,
            #[cfg(feature = "live")]
            live,
            classic,
        }
    }

    /// Hands new stream bytes to the stream sinks.
    fn stream(&mut self, bytes: &[u8], shared: &Shared) {
        if bytes.is_empty() {
            return;
        }
        shared
            .stream_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write(bytes) {
                shared.fail(
                    SinkKind::StreamFile,
                    format!("writing the stream file: {e}"),
                );
                self.file = None;
            }
        }
        #[cfg(feature = "live")]
        if let Some(l) = &mut self.live {
            l.send(bytes);
        }
    }

    fn record(&mut self, r: &Record, shared: &Shared) {
        if let Some(c) = &mut self.classic {
            if let Err(e) = c.record(r) {
                shared.fail(SinkKind::Classic, format!("writing the classic file: {e}"));
                self.classic = None;
            }
        }
    }
}

/// The stream encoder, signed when the recording is (its key chunk signed here, on the
/// background thread).
fn encoder(info: Info, config: &Config, signer: MaybeSigner, shared: &Shared) -> StreamEncoder {
    #[cfg(feature = "integrity")]
    if let Some(signer) = signer {
        match signer.into_encoder(info.clone(), config.settings) {
            Ok(e) => return e,
            // `start` checked both causes; kept as a message, not a panic.
            Err(e) => shared.log(
                LogLevel::Error,
                &format!("the recording is not signed: {e}"),
            ),
        }
    }
    #[cfg(not(feature = "integrity"))]
    let _ = (signer, shared);
    StreamEncoder::new(info, config.settings)
}

pub(super) fn run(
    info: Info,
    config: Config,
    signer: MaybeSigner,
    mut ring: rtrb::Consumer<Record>,
    shared: Arc<Shared>,
) {
    let mut sinks = Sinks::open(&config, &shared);
    let mut enc = encoder(info, &config, signer, &shared);
    sinks.stream(&enc.take_output(), &shared);
    // A chunk closes when a frame past the flush interval arrives; when the game stops
    // sending frames (a pause, a hitch), the open chunk goes out after `idle_flush`.
    let idle_flush = config.idle_flush;
    let mut last_record = Instant::now();
    loop {
        // Acquire: the records pushed before finish are visible in the ring.
        let finishing = shared.finishing.load(Ordering::Acquire);
        let stopping = shared.stop.load(Ordering::Acquire);
        let mut n = 0u64;
        while let Ok(r) = ring.pop() {
            match &r {
                Record::Frame(f) => {
                    enc.push_frame(f);
                }
                Record::Note(x) => enc.push_note(*x),
                Record::Wall(x) => enc.push_wall(*x),
                Record::Height(x) => enc.push_height(*x),
                Record::Pause(x) => enc.push_pause(*x),
            }
            sinks.record(&r, &shared);
            n += 1;
            // Hand over chunks as they close, not after a long backlog.
            if n % 256 == 0 {
                sinks.stream(&enc.take_output(), &shared);
                shared.encoded.fetch_add(256, Ordering::Relaxed);
            }
        }
        shared.encoded.fetch_add(n % 256, Ordering::Relaxed);
        let now = Instant::now();
        if n > 0 {
            last_record = now;
        } else if idle_flush.is_some_and(|d| enc.unflushed() > 0 && now - last_record >= d) {
            enc.flush();
        }
        sinks.stream(&enc.take_output(), &shared);
        #[cfg(feature = "live")]
        if let Some(l) = &mut sinks.live {
            l.check();
        }
        if finishing {
            let ending = shared.finish.lock().ok().and_then(|mut s| s.take());
            end(enc, sinks, ending, &shared);
            break;
        }
        if stopping {
            enc.flush();
            sinks.stream(&enc.take_output(), &shared);
            shared.log(
                LogLevel::Warn,
                "recorder dropped before finish: the stream ends without its trailer",
            );
            end_unfinished(sinks, &shared);
            break;
        }
        // Woken early by finish and drop; pushes never wake it (that would be a system
        // call on the game thread).
        std::thread::park_timeout(config.poll_interval);
    }
    shared.ended.store(true, Ordering::Release);
}

/// The song ended: the last chunks, the trailer, the index; the classic file.
fn end(mut enc: StreamEncoder, mut sinks: Sinks, ending: Option<Ending>, shared: &Shared) {
    let Some(ending) = ending else {
        return end_unfinished(sinks, shared);
    };
    enc.finish(
        ending.info.clone(),
        ending.controller_offsets,
        ending.user_data.clone(),
        Vec::new(),
    );
    sinks.stream(&enc.take_output(), shared);
    if let Some(f) = sinks.file.take() {
        match f.file.sync_all() {
            Ok(()) => shared.set_sink(SinkKind::StreamFile, SinkState::Done),
            Err(e) => shared.fail(
                SinkKind::StreamFile,
                format!("syncing the stream file: {e}"),
            ),
        }
    }
    if let Some(c) = sinks.classic.take() {
        let tail = classic_tail(&enc, ending.controller_offsets, ending.user_data, shared);
        match c.finish(ending.info, tail) {
            Ok(()) => shared.set_sink(SinkKind::Classic, SinkState::Done),
            Err(e) => shared.fail(SinkKind::Classic, format!("writing the classic file: {e}")),
        }
    }
    #[cfg(feature = "live")]
    if let Some(l) = sinks.live.take() {
        l.finish(true);
    }
    shared.log(LogLevel::Info, "recording finished");
}

/// The classic file's controller offsets, user data and trailing bytes: the recording's,
/// with the signature entry added to the user data when the recording is signed
/// (`integrity.md` §13). User data not in BeatLeader's key/value form has no place for it:
/// the file is then written without it, and the log says so.
fn classic_tail(
    enc: &StreamEncoder,
    controller_offsets: Option<crate::bsor::ControllerOffsets>,
    user_data: Option<Vec<u8>>,
    shared: &Shared,
) -> crate::bsor::Replay {
    let tail = crate::bsor::Replay {
        controller_offsets,
        user_data,
        ..Default::default()
    };
    #[cfg(feature = "integrity")]
    if let Some(chunks) = enc
        .hook()
        .and_then(|h| h.as_any().downcast_ref::<crate::integrity::Signer>())
        .and_then(|s| s.kept())
    {
        let mut signed = tail.clone();
        match crate::integrity::add_entry(&mut signed, chunks) {
            Ok(()) => return signed,
            Err(e) => shared.log(
                LogLevel::Warn,
                &format!("the classic file is written without its signature: {e}"),
            ),
        }
    }
    #[cfg(not(feature = "integrity"))]
    let _ = (enc, shared);
    tail
}

/// Stopped without finish: what was written stays; nothing is completed, and the sinks
/// keep the state they had. The stream file is synced only with `sync_each_chunk` (as its
/// chunks were): what was written survives a crash of the game either way, and a drop
/// (often on the game thread) does not wait for the disk without being asked to.
fn end_unfinished(mut sinks: Sinks, _shared: &Shared) {
    if let Some(f) = sinks.file.take() {
        if f.sync {
            let _ = f.file.sync_data();
        }
    }
    if let Some(c) = sinks.classic.take() {
        c.abandon();
    }
    #[cfg(feature = "live")]
    if let Some(l) = sinks.live.take() {
        l.finish(false);
    }
}
