//! The recorder runtime that a game mod embeds: the game pushes frames and events on its
//! render thread, a background thread encodes them into the stream format and feeds the
//! sinks.
//!
//! The game thread's side ([`Recorder::push_frame`] and the other `push_*` calls) only
//! moves a record into a bounded single-producer single-consumer ring (`rtrb`): no
//! allocation, no lock, no I/O and no system call. When the ring is full the record is
//! refused at once, as a counted drop or as back-pressure ([`OnFull`]), never a stall. The
//! background thread polls the ring (it is not woken, so that a push stays free of system
//! calls), encodes with [`StreamEncoder`](crate::stream::StreamEncoder), and hands the bytes to the sinks:
//!
//! - a `.bsors` file, written chunk by chunk as the encoder closes them, so a crash loses at
//!   most the last flush interval ([`Settings::flush_seconds`] of song time, or as long in
//!   wall time when the game stops sending frames, in a pause say);
//! - a live publisher to a relay ([`LiveConfig`]), which reconnects and resumes without
//!   loss, buffering up to a bound meanwhile;
//! - a classic `.bsor` file, written at [`Recorder::finish`] (its frames are spooled to a
//!   side file while the song plays, so memory holds only the events).
//!
//! A sink that fails is reported through [`Recorder::status`] and the log callback; the
//! others go on. Nothing here panics into the caller.

mod classic;
#[cfg(feature = "live")]
mod live;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtrb::RingBuffer;

use crate::bsor::{ControllerOffsets, Frame, Height, Info, NoteEvent, Pause, Wall};
use crate::stream::{Profile, Settings};

#[cfg(feature = "live")]
pub use live::LiveConfig;

/// What a push does when the ring is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFull {
    /// Drop the record and count it ([`Status::dropped`]); the push returns
    /// [`Push::Dropped`].
    #[default]
    Drop,
    /// Refuse the record ([`Push::Full`]) so that the caller may try again later.
    BackPressure,
}

/// The result of a push.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// The record is queued and will be encoded.
    Queued,
    /// The ring was full and the record was dropped (counted).
    Dropped,
    /// The ring was full and the record was not taken ([`OnFull::BackPressure`]).
    Full,
    /// The recorder is finished or stopped and takes no more records.
    Closed,
}

/// Severity of a log message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Something failed.
    Error = 1,
    /// Something unusual that the recorder handled.
    Warn = 2,
    /// Progress.
    Info = 3,
}

/// Receives the recorder's log messages. Called only on the recorder's background threads
/// (the encoder's and the live publisher's), never on a thread that calls a [`Recorder`]
/// method, so never on the game thread that pushes. Two calls may run at the same time, on
/// different background threads: the function serialises itself if it needs to.
pub type LogFn = Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

/// How to record.
#[derive(Clone)]
pub struct Config {
    /// Stream settings: profile, keyframe and flush intervals.
    pub settings: Settings,
    /// Capacity of the ring between the game thread and the background, in records (one
    /// frame or one event each), from 1 to [`MAX_QUEUE_CAPACITY`]. The default, 8192, holds
    /// over a minute at 120 frames per second.
    pub queue_capacity: usize,
    /// What a push does when the ring is full.
    pub on_full: OnFull,
    /// How often the background thread looks at the ring.
    pub poll_interval: Duration,
    /// When the game stops sending frames (a pause, a hitch) for this long in wall time,
    /// the open chunk goes out anyway, so that the file and the viewers lose at most this
    /// much on a crash. `None` leaves chunk boundaries to song time alone, which makes the
    /// stream bytes depend only on what was pushed. Default: 100 ms, the live flush interval.
    pub idle_flush: Option<Duration>,
    /// Write the stream to this `.bsors` file, chunk by chunk.
    pub stream_file: Option<PathBuf>,
    /// Ask the OS to put each chunk of the stream file on disk (`fdatasync`), so that even
    /// a power loss keeps all but the last flush interval. Without it, a crash of the game
    /// keeps them, not a crash of the machine.
    pub sync_each_chunk: bool,
    /// At finish, write the replay as a classic `.bsor` file here.
    pub classic_file: Option<PathBuf>,
    /// Publish live to a relay (feature `live`).
    #[cfg(feature = "live")]
    pub live: Option<LiveConfig>,
    /// Receives log messages.
    pub log: Option<LogFn>,
    /// Sign the recording with the player's key (feature `integrity`,
    /// `proto-spec/integrity.md`): the stream (file and live) gets the key chunk, a
    /// checkpoint each keyframe group and the final checkpoint, and the classic file the
    /// signature entry (§13). Only the lossless profile is signed. Hashing and signing run
    /// on the background thread; a push does no more than without it. The key is the
    /// player's secret: whoever holds it signs as the player.
    #[cfg(feature = "integrity")]
    pub signing_key: Option<crate::integrity::SigningKey>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            settings: Settings::live(Profile::Lossless),
            queue_capacity: 8192,
            on_full: OnFull::Drop,
            poll_interval: Duration::from_millis(4),
            idle_flush: Some(Duration::from_millis(100)),
            stream_file: None,
            sync_each_chunk: false,
            classic_file: None,
            #[cfg(feature = "live")]
            live: None,
            log: None,
            #[cfg(feature = "integrity")]
            signing_key: None,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("settings", &self.settings)
            .field("queue_capacity", &self.queue_capacity)
            .field("on_full", &self.on_full)
            .field("poll_interval", &self.poll_interval)
            .field("idle_flush", &self.idle_flush)
            .field("stream_file", &self.stream_file)
            .field("sync_each_chunk", &self.sync_each_chunk)
            .field("classic_file", &self.classic_file);
        #[cfg(feature = "live")]
        d.field("live", &self.live);
        #[cfg(feature = "integrity")]
        d.field(
            "signing_key",
            &self
                .signing_key
                .as_ref()
                .map(|k| crate::integrity::hex(k.verifying_key().as_bytes())),
        );
        d.field("log", &self.log.as_ref().map(|_| "callback"))
            .finish()
    }
}

/// The largest ring [`Config::queue_capacity`] allows, in records: over two hours at 120
/// frames per second. The ring is allocated (and touched) whole at start, so a larger one
/// would only risk the game's memory: a reservation that succeeds can still get the process
/// killed later on a headset.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 20;

/// A configuration the recorder cannot start with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The ring must hold 1 to [`MAX_QUEUE_CAPACITY`] records.
    #[error("queue_capacity {0} is not between 1 and {MAX_QUEUE_CAPACITY}")]
    Capacity(usize),
    /// Keyframe or flush intervals that are negative or not finite.
    #[error("keyframe and flush intervals must be finite and not negative")]
    BadSettings,
    /// The background thread could not be started.
    #[error("starting the background thread: {0}")]
    Thread(std::io::Error),
    /// A signing key was given for a recording that cannot be signed (a lossy profile,
    /// info strings too long for the key chunk).
    #[cfg(feature = "integrity")]
    #[error("signing: {0}")]
    Sign(#[from] crate::integrity::SignError),
    /// The recording nonce could not be drawn from the OS's randomness.
    #[cfg(feature = "integrity")]
    #[error("drawing the recording nonce: {0}")]
    Nonce(String),
}

/// The signer the background thread drives, if the recording is signed.
#[cfg(feature = "integrity")]
type MaybeSigner = Option<crate::integrity::Signer>;
#[cfg(not(feature = "integrity"))]
type MaybeSigner = Option<std::convert::Infallible>;

/// The signer for `config`'s key, checked here so that a recording that cannot be signed
/// does not start; signing itself is left to the background thread.
#[cfg(feature = "integrity")]
fn signer(info: &Info, config: &Config) -> Result<MaybeSigner, StartError> {
    use crate::integrity::{random_nonce, SignError, Signer};
    let Some(key) = &config.signing_key else {
        return Ok(None);
    };
    if config.settings.profile != Profile::Lossless {
        return Err(SignError::Lossy(config.settings.profile).into());
    }
    Signer::fits(info)?;
    let nonce = random_nonce().map_err(|e| StartError::Nonce(e.to_string()))?;
    let signer = Signer::new(key.clone(), nonce);
    // The classic file's entry needs the chunks at the end.
    Ok(Some(if config.classic_file.is_some() {
        signer.keeping()
    } else {
        signer
    }))
}

#[cfg(not(feature = "integrity"))]
fn signer(_: &Info, _: &Config) -> Result<MaybeSigner, StartError> {
    Ok(None)
}

/// The state of one sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkState {
    /// Not configured.
    Off = 0,
    /// Working.
    Running = 1,
    /// Failed; see [`Status::last_error`]. The other sinks go on.
    Failed = 2,
    /// Finished and complete.
    Done = 3,
    /// The live sink is not connected: connecting, or waiting to reconnect after a lost
    /// connection (its chunks wait in its buffer meanwhile). It gives up, as
    /// [`Failed`](Self::Failed), after [`LiveConfig::max_retries`] failed attempts in a row.
    Connecting = 4,
}

impl SinkState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => SinkState::Running,
            2 => SinkState::Failed,
            3 => SinkState::Done,
            4 => SinkState::Connecting,
            _ => SinkState::Off,
        }
    }
}

/// Which sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkKind {
    /// The `.bsors` file.
    StreamFile = 0,
    /// The live publisher.
    Live = 1,
    /// The classic `.bsor` file.
    Classic = 2,
}

/// A snapshot of the recorder's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Records the game pushed and the ring took.
    pub accepted: u64,
    /// Records dropped because the ring was full ([`OnFull::Drop`]).
    pub dropped: u64,
    /// Records refused because the ring was full ([`OnFull::BackPressure`]).
    pub refused: u64,
    /// Records the background has encoded.
    pub encoded: u64,
    /// Stream bytes produced.
    pub stream_bytes: u64,
    /// The `.bsors` file.
    pub stream_file: SinkState,
    /// The live publisher.
    pub live: SinkState,
    /// The classic `.bsor` file.
    pub classic: SinkState,
    /// Chunks the relay has acknowledged (live sink).
    pub live_acked: u64,
    /// The background thread has ended (after finish, or after a stop).
    pub ended: bool,
    /// The last error message of any sink.
    pub last_error: Option<String>,
}

/// What the game thread and the background share. Counters are written by one side each.
struct Shared {
    encoded: AtomicU64,
    stream_bytes: AtomicU64,
    live_acked: AtomicU64,
    sinks: [AtomicU8; 3],
    /// Set (with the final records) when the game calls finish.
    finish: Mutex<Option<Ending>>,
    finishing: AtomicBool,
    /// Set when the recorder is dropped without finish: end the stream as it is.
    stop: AtomicBool,
    ended: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Taken away when the recorder is dropped: a live thread still ending on its own after
    /// that logs nothing (the caller's log context may be gone).
    log: Mutex<Option<LogFn>>,
}

impl Shared {
    fn set_sink(&self, k: SinkKind, s: SinkState) {
        self.sinks[k as usize].store(s as u8, Ordering::Release);
    }

    fn sink(&self, k: SinkKind) -> SinkState {
        SinkState::from_u8(self.sinks[k as usize].load(Ordering::Acquire))
    }

    /// Sets sink `k` to `to` if it is `from` (a live sink that failed or is done stays so).
    #[cfg(feature = "live")]
    fn move_sink(&self, k: SinkKind, from: SinkState, to: SinkState) {
        let _ = self.sinks[k as usize].compare_exchange(
            from as u8,
            to as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Logs, under the lock that [`Recorder`]'s drop takes to silence the log: once the
    /// drop returns, no call is running and none will start.
    fn log(&self, level: LogLevel, msg: &str) {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = log.as_ref() {
            f(level, msg);
        }
    }

    /// A sink failed: mark it, keep the message, log it. Only for the background threads,
    /// where the log is called ([`LogFn`]).
    fn fail(&self, k: SinkKind, msg: String) {
        self.set_sink(k, SinkState::Failed);
        self.log(LogLevel::Error, &msg);
        self.keep_error(msg);
    }

    /// Keeps `msg` as the last error, for [`Status::last_error`].
    fn keep_error(&self, msg: String) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(msg);
        }
    }
}

/// What only the end of the song knows.
struct Ending {
    info: Info,
    controller_offsets: Option<ControllerOffsets>,
    user_data: Option<Vec<u8>>,
}

/// One record on its way from the game thread to the background. Aligned to cache lines
/// (two, 128 bytes): the game thread writing one slot never touches a line that the
/// background is reading from the slot before.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
enum Record {
    Frame(Frame),
    Note(NoteEvent),
    Wall(Wall),
    Height(Height),
    Pause(Pause),
}

/// What the pushes did, counted by the game thread.
#[derive(Clone, Copy, Debug, Default)]
struct Pushed {
    accepted: u64,
    dropped: u64,
    refused: u64,
}

/// Records a replay while the song plays. See the [module](self) documentation.
///
/// The push calls take `&mut self`: one thread (the game's render thread) pushes. The
/// recorder may move between threads.
///
/// # Examples
///
/// A song of one second at 90 frames per second, into a `.bsors` file:
///
/// ```
/// use std::time::Duration;
///
/// use bsor_stream_core::bsor::{Frame, Info};
/// use bsor_stream_core::recorder::{Config, Push, Recorder, SinkState};
///
/// let path = std::env::temp_dir().join(format!("doc-{}.bsors", std::process::id()));
/// let config = Config {
///     stream_file: Some(path.clone()),
///     ..Config::default()
/// };
/// let mut recorder = Recorder::start(Info::default(), config)?;
/// for k in 0..90 {
///     let frame = Frame {
///         time: k as f32 / 90.0,
///         fps: 90,
///         ..Frame::default()
///     };
///     assert_eq!(recorder.push_frame(&frame), Push::Queued);
/// }
/// assert!(recorder.finish(Info::default()));
/// let status = recorder.wait(Duration::from_secs(10)).expect("the background ends");
/// assert_eq!((status.accepted, status.encoded), (90, 90));
/// assert_eq!(status.stream_file, SinkState::Done);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Recorder {
    ring: rtrb::Producer<Record>,
    /// Counted here, beside the ring's producer end, not in shared memory: a push touches
    /// no line that the background writes.
    pushed: Pushed,
    shared: Arc<Shared>,
    on_full: OnFull,
    controller_offsets: Option<ControllerOffsets>,
    user_data: Option<Vec<u8>>,
    closed: bool,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("status", &self.status())
            .finish()
    }
}

impl Recorder {
    /// Starts recording a song whose info block, as known at its start, is `info`, and
    /// starts the background thread. A sink that cannot start (a file that cannot be
    /// created, say) is reported as failed in [`status`](Self::status), not here.
    pub fn start(info: Info, config: Config) -> Result<Recorder, StartError> {
        if !(1..=MAX_QUEUE_CAPACITY).contains(&config.queue_capacity) {
            return Err(StartError::Capacity(config.queue_capacity));
        }
        let s = config.settings;
        let ok = |v: f32| v.is_finite() && v >= 0.0;
        if !ok(s.keyframe_seconds) || !ok(s.flush_seconds) {
            return Err(StartError::BadSettings);
        }
        let signer = signer(&info, &config)?;
        let (mut producer, mut consumer) = RingBuffer::new(config.queue_capacity);
        // Touch every slot once now, so that no push during the song takes a page fault on
        // ring memory the allocator handed out untouched.
        for _ in 0..config.queue_capacity {
            let _ = producer.push(Record::Pause(Pause::default()));
        }
        while consumer.pop().is_ok() {}
        let shared = Arc::new(Shared {
            encoded: AtomicU64::new(0),
            stream_bytes: AtomicU64::new(0),
            live_acked: AtomicU64::new(0),
            sinks: [AtomicU8::new(0), AtomicU8::new(0), AtomicU8::new(0)],
            finish: Mutex::new(None),
            finishing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            last_error: Mutex::new(None),
            log: Mutex::new(config.log.clone()),
        });
        let on_full = config.on_full;
        let worker_shared = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("bsor-recorder".into())
            .spawn(move || worker::run(info, config, signer, consumer, worker_shared))
            .map_err(StartError::Thread)?;
        Ok(Recorder {
            ring: producer,
            pushed: Pushed::default(),
            shared,
            on_full,
            controller_offsets: None,
            user_data: None,
            closed: false,
            worker: Some(worker),
        })
    }

    fn push(&mut self, r: Record) -> Push {
        if self.closed {
            return Push::Closed;
        }
        match self.ring.push(r) {
            Ok(()) => {
                self.pushed.accepted += 1;
                Push::Queued
            }
            Err(_) => match self.on_full {
                OnFull::Drop => {
                    self.pushed.dropped += 1;
                    Push::Dropped
                }
                OnFull::BackPressure => {
                    self.pushed.refused += 1;
                    Push::Full
                }
            },
        }
    }

    /// Queues a frame. Frames must come in song order.
    pub fn push_frame(&mut self, f: &Frame) -> Push {
        self.push(Record::Frame(*f))
    }

    /// Queues a note event (good or bad cut, miss, bomb).
    pub fn push_note(&mut self, n: &NoteEvent) -> Push {
        self.push(Record::Note(*n))
    }

    /// Queues a wall event.
    pub fn push_wall(&mut self, w: &Wall) -> Push {
        self.push(Record::Wall(*w))
    }

    /// Queues an automatic height change.
    pub fn push_height(&mut self, h: &Height) -> Push {
        self.push(Record::Height(*h))
    }

    /// Queues a pause.
    pub fn push_pause(&mut self, p: &Pause) -> Push {
        self.push(Record::Pause(*p))
    }

    /// Sets the controller offsets (written at the end of the stream and of the BSOR).
    /// Returns false, keeping nothing, once the recorder is finished.
    pub fn set_controller_offsets(&mut self, o: ControllerOffsets) -> bool {
        if self.closed {
            return false;
        }
        self.controller_offsets = Some(o);
        true
    }

    /// Sets the user data (written at the end). Copies the bytes: call it outside the
    /// per-frame path. Returns false, keeping nothing, once the recorder is finished.
    pub fn set_user_data(&mut self, data: &[u8]) -> bool {
        if self.closed {
            return false;
        }
        self.user_data = Some(data.to_vec());
        true
    }

    /// Ends the song with the info known at its end (score, failTime...). Returns at once;
    /// the background thread writes the last chunks, the trailer and the classic file, and
    /// [`wait`](Self::wait) waits for it. Returns false if the recorder was already closed.
    pub fn finish(&mut self, final_info: Info) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        let ending = Ending {
            info: final_info,
            controller_offsets: self.controller_offsets.take(),
            user_data: self.user_data.take(),
        };
        if let Ok(mut slot) = self.shared.finish.lock() {
            *slot = Some(ending);
        }
        // Release: every record pushed before is in the ring when the background sees this.
        self.shared.finishing.store(true, Ordering::Release);
        if let Some(w) = &self.worker {
            w.thread().unpark();
        }
        true
    }

    /// A snapshot of the progress and of each sink. Cheap: a few atomic loads.
    pub fn status(&self) -> Status {
        let s = &self.shared;
        Status {
            accepted: self.pushed.accepted,
            dropped: self.pushed.dropped,
            refused: self.pushed.refused,
            encoded: s.encoded.load(Ordering::Relaxed),
            stream_bytes: s.stream_bytes.load(Ordering::Relaxed),
            stream_file: s.sink(SinkKind::StreamFile),
            live: s.sink(SinkKind::Live),
            classic: s.sink(SinkKind::Classic),
            live_acked: s.live_acked.load(Ordering::Relaxed),
            ended: s.ended.load(Ordering::Acquire),
            last_error: s.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// Waits up to `timeout` for the background thread to end (after [`finish`] or a
    /// stop), and returns the final status; `None` if it is still running.
    ///
    /// [`finish`]: Self::finish
    pub fn wait(&mut self, timeout: Duration) -> Option<Status> {
        let deadline = Instant::now() + timeout;
        while !self.shared.ended.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(w) = self.worker.take() {
            if w.join().is_err() {
                // Not `fail`: this is the caller's thread, where the log is never called.
                self.shared
                    .set_sink(SinkKind::StreamFile, SinkState::Failed);
                self.shared
                    .keep_error("the background thread panicked".into());
            }
        }
        Some(self.status())
    }
}

impl Recorder {
    /// Stops the recorder as a drop does, but waits at most `wait` for the background
    /// thread: past that it is left to end on its own (writing out what it holds, and
    /// completing the files after a [`finish`](Self::finish)), without logging. Returns
    /// whether it ended within `wait`. For a caller that must not block, such as a game's
    /// main thread; call [`wait`](Self::wait) first to know the files are complete.
    pub fn close(mut self, wait: Duration) -> bool {
        self.closed = true;
        self.shared.stop.store(true, Ordering::Release);
        let Some(w) = self.worker.take() else {
            return true;
        };
        w.thread().unpark();
        let deadline = Instant::now() + wait;
        while !w.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(50));
        }
        if w.is_finished() {
            let _ = w.join();
            true
        } else {
            false
        }
    }
}

impl Drop for Recorder {
    /// Dropping a recorder that was not finished ends the stream where it is: the chunks
    /// so far are written out (a stream without trailer, which decodes as a cut-short
    /// recording), the classic file is not written. Waits for the background thread, which
    /// does not wait for the network: a live sink still connecting, sending or finishing
    /// is left to end on its own thread, within its retry budget ([`LiveConfig`]), and logs
    /// nothing once the drop has returned.
    fn drop(&mut self) {
        self.closed = true;
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            w.thread().unpark();
            let _ = w.join();
        }
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
