//! `encode`, `decode` and `events`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use bsor_stream::bsor;
use bsor_stream::stream::{Settings, StreamDecoder, StreamItem};
use bsor_stream::transcode::{self, BsorSink, BsorToStream, Recovery, ReplayCollector, SinkEnd};

use super::{is_std, json_err, open_input, open_output, read_all, stdout_err, Failure, Outcome};

const PIECE: usize = 64 * 1024;

/// `encode IN -o OUT`: BSOR in, stream out. A whole file is read first, so that every
/// event goes out with the first chunk after its song time (as a recorder sends it); from
/// stdin the stream comes chunk by chunk as the input arrives, and the events, which BSOR
/// stores after every frame, follow when their bytes do.
pub fn encode(input: &Path, output: &Path, settings: Settings) -> Result<Outcome, Failure> {
    let mut w = open_output(output)?;
    let out_err = |e: io::Error| {
        if is_std(output) {
            stdout_err(e)
        } else {
            Failure::from((output, e))
        }
    };
    if !is_std(input) {
        let bytes = read_all(input)?;
        let mut replay = bsor_stream::bsor::parse(&bytes).map_err(|e| Failure::from((input, e)))?;
        let out = match super::integrity::carried(input, &mut replay, settings)? {
            Some(signed) => signed,
            None => transcode::encode_replay(&replay, settings),
        };
        w.write_all(&out).map_err(out_err)?;
        w.flush().map_err(out_err)?;
        return Ok(Outcome::Done);
    }
    let mut r = open_input(input)?;
    let mut t = BsorToStream::new(settings);
    let mut piece = vec![0u8; PIECE];
    loop {
        let n = match r.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err((input, e).into()),
        };
        t.push(&piece[..n]).map_err(|e| Failure::from((input, e)))?;
        let out = t.take_output();
        if !out.is_empty() {
            w.write_all(&out).map_err(out_err)?;
            w.flush().map_err(out_err)?;
        }
    }
    t.finish().map_err(|e| Failure::from((input, e)))?;
    w.write_all(&t.take_output()).map_err(out_err)?;
    w.flush().map_err(out_err)?;
    Ok(Outcome::Done)
}

pub(super) fn report(rec: &Recovery) -> Outcome {
    eprintln!(
        "decoded {} frames and {} events from {} chunks; {} damaged ({} bytes skipped, about {} frames and {} events lost){}",
        rec.frames,
        rec.events,
        rec.stats.chunks,
        rec.stats.damaged,
        rec.stats.bytes_skipped,
        rec.stats.frames_lost,
        rec.stats.events_lost,
        if rec.complete { "; complete" } else { "; INCOMPLETE: only part was recovered" }
    );
    for d in rec.damage.iter().take(20) {
        eprintln!(
            "  damage at byte {}: {} ({} bytes skipped)",
            d.offset, d.kind, d.skipped_bytes
        );
    }
    if rec.complete {
        Outcome::Done
    } else {
        Outcome::Partial
    }
}

/// `decode IN -o OUT [--from S --to S] [--follow]`.
pub fn decode(
    input: &Path,
    output: &Path,
    from: Option<f32>,
    to: Option<f32>,
    follow: bool,
) -> Result<Outcome, Failure> {
    if from.is_some() || to.is_some() {
        let bytes = read_all(input)?;
        let (from, to) = (
            from.unwrap_or(f32::NEG_INFINITY),
            to.unwrap_or(f32::INFINITY),
        );
        let (replay, rec) =
            transcode::decode_span(&bytes, from, to).map_err(|e| Failure::from((input, e)))?;
        write_bsor(output, &replay)?;
        return Ok(report(&rec));
    }
    if follow {
        return decode_follow(input, output);
    }
    if let Some(done) = super::integrity::decode_signed(input, output)? {
        return Ok(done);
    }
    let mut r = open_input(input)?;
    let mut d = StreamDecoder::new();
    let mut piece = vec![0u8; PIECE];
    if is_std(output) {
        // A pipe cannot seek back to patch the frame count: collect, then write.
        let mut c = ReplayCollector::default();
        feed(&mut *r, input, &mut d, &mut piece, |item| {
            c.apply(item);
            Ok(())
        })?;
        let (replay, rec) = c.finish(d.stats());
        write_bsor(output, &replay)?;
        return Ok(report(&rec));
    }
    let (tmp, file) = Staged::create(output)?;
    let mut sink: Option<BsorSink<File>> = None;
    let mut pending = Some(file);
    let mut c = ReplayCollector::counting();
    feed(&mut *r, input, &mut d, &mut piece, |item| {
        if let StreamItem::Header(h) = &item {
            if let Some(f) = pending.take() {
                sink = Some(BsorSink::new(f, h).map_err(|e| (output, e))?);
            }
        }
        c.apply(item.clone());
        if let Some(s) = &mut sink {
            s.apply(item).map_err(|e| (output, e))?;
        }
        Ok(())
    })?;
    if let Some(s) = sink {
        match s.finish().map_err(|e| (output, e))? {
            SinkEnd::Complete(_) => tmp.commit()?,
            SinkEnd::Relocate { mut w, head, skip } => {
                // The final info is longer or shorter than the header's: the file is
                // written again with the new head before what followed the old one.
                let (moved, mut out) = Staged::create(output)?;
                w.seek(SeekFrom::Start(skip))
                    .and_then(|_| out.write_all(&head))
                    .and_then(|()| std::io::copy(&mut w, &mut out))
                    .and_then(|_| out.flush())
                    .map_err(|e| (output, e))?;
                drop(w);
                moved.commit()?;
            }
            _ => {
                return Err(Failure(format!(
                    "{}: unexpected sink end",
                    output.display()
                )))
            }
        }
    }
    let (_, rec) = c.finish(d.stats());
    Ok(report(&rec))
}

/// A file written under a temporary name beside its destination and renamed over it only
/// once complete: a decode that fails leaves no file (and never a wrong one) behind.
struct Staged {
    tmp: std::path::PathBuf,
    dest: std::path::PathBuf,
    done: bool,
}

impl Staged {
    fn create(dest: &Path) -> Result<(Staged, File), Failure> {
        let name = dest
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        // Distinct per call: a relocation stages a second file while the first is open.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dest.with_file_name(format!(".{name}.partial-{}-{n}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| (dest, e))?;
        let staged = Staged {
            tmp,
            dest: dest.to_path_buf(),
            done: false,
        };
        Ok((staged, file))
    }

    fn commit(mut self) -> Result<(), Failure> {
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| (self.dest.as_path(), e))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn feed(
    r: &mut dyn Read,
    input: &Path,
    d: &mut StreamDecoder,
    piece: &mut [u8],
    mut each: impl FnMut(StreamItem) -> Result<(), Failure>,
) -> Result<(), Failure> {
    loop {
        let n = match r.read(piece) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err((input, e).into()),
        };
        if n == 0 {
            d.finish();
        } else {
            d.push(&piece[..n]);
        }
        while let Some(item) = d.next_item().map_err(|e| Failure::from((input, e)))? {
            each(item)?;
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// Reads a file that is still being written, until its stream ends (its footer arrives)
/// or nothing new comes for 30 s.
fn decode_follow(input: &Path, output: &Path) -> Result<Outcome, Failure> {
    let mut f = File::open(input).map_err(|e| (input, e))?;
    let mut d = StreamDecoder::new();
    let mut c = ReplayCollector::default();
    let mut piece = vec![0u8; PIECE];
    let mut last_new = Instant::now();
    let mut ended = false;
    while !ended {
        let n = f.read(&mut piece).map_err(|e| (input, e))?;
        if n == 0 {
            if last_new.elapsed() > Duration::from_secs(30) {
                d.finish();
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
        } else {
            last_new = Instant::now();
            d.push(&piece[..n]);
        }
        while let Some(item) = d.next_item().map_err(|e| Failure::from((input, e)))? {
            if matches!(item, StreamItem::Index(_) | StreamItem::End) {
                ended = true;
            }
            c.apply(item);
        }
    }
    let (replay, rec) = c.finish(d.stats());
    write_bsor(output, &replay)?;
    Ok(report(&rec))
}

pub(super) fn write_bsor(output: &Path, replay: &bsor::Replay) -> Result<(), Failure> {
    let bytes = bsor::to_vec(replay).map_err(|e| (output, e))?;
    if !is_std(output) {
        let (staged, mut f) = Staged::create(output)?;
        f.write_all(&bytes).map_err(|e| (output, e))?;
        drop(f);
        return staged.commit();
    }
    let mut w = open_output(output)?;
    w.write_all(&bytes).and_then(|()| w.flush()).map_err(|e| {
        if is_std(output) {
            stdout_err(e)
        } else {
            Failure::from((output, e))
        }
    })
}

/// `events FILE [--json]`: through the index when the file has one, else by reading only
/// the event chunks' payloads sequentially.
pub fn events(file: &Path, json: bool) -> Result<Outcome, Failure> {
    let mut f = File::open(file).map_err(|e| (file, e))?;
    let batch = match transcode::read_events(&mut f).map_err(|e| (file, e))? {
        Some((_, batch)) => batch,
        None => {
            let bytes = read_all(file)?;
            let mut d = StreamDecoder::events_only();
            d.push(&bytes);
            d.finish();
            let mut all = bsor_stream::stream::EventBatch::default();
            while let Some(item) = d.next_item().map_err(|e| Failure::from((file, e)))? {
                if let StreamItem::Events(b) = item {
                    all.notes.records.extend(b.notes.records);
                    all.walls.records.extend(b.walls.records);
                    all.heights.records.extend(b.heights.records);
                    all.pauses.records.extend(b.pauses.records);
                }
            }
            all
        }
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let v = serde_json::json!({
            "notes": batch.notes.records,
            "walls": batch.walls.records,
            "heights": batch.heights.records,
            "pauses": batch.pauses.records,
        });
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        let r = bsor::Replay {
            notes: batch.notes.records,
            walls: batch.walls.records,
            heights: batch.heights.records,
            pauses: batch.pauses.records,
            ..bsor::Replay::default()
        };
        let s = bsor::Summary::of(&r);
        let t = s.note_event_types;
        writeln!(
            out,
            "notes {} (good {}, bad {}, miss {}, bomb {}); walls {}; heights {}; pauses {}; score from cuts {}",
            s.notes, t.good, t.bad, t.miss, t.bomb, s.walls, s.heights, s.pauses,
            bsor::replay_score(&r)
        )
        .map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
    Ok(Outcome::Done)
}
