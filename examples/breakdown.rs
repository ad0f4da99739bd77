//! Where a stream's bytes go: for every profile under the live and the archive settings,
//! the chunks of each type summed over a folder of BSOR files, their headers and payloads
//! as a share of the BSOR bytes; and what zstd (level 3) would make of the frame and event
//! payloads, each chunk's alone or, as a live stream would, through one zstd stream per
//! keyframe group and kind flushed at every chunk:
//!
//! ```sh
//! cargo run --release --example breakdown -- ../shared/corpus
//! ```

use std::collections::BTreeMap;

use bsor_stream::bsor;
use bsor_stream::stream::{split_stream, ChunkType, Profile, Settings};
use bsor_stream::transcode;

/// Chunks, header bytes and payload bytes of one chunk type.
#[derive(Default)]
struct Part {
    chunks: usize,
    header: usize,
    payload: usize,
    /// The payloads through zstd: each alone, and through the group's zstd stream.
    zstd_alone: usize,
    zstd_stream: usize,
}

/// One zstd stream of a keyframe group and kind, flushed at every chunk.
struct GroupStream(zstd::stream::write::Encoder<'static, Vec<u8>>);

impl GroupStream {
    fn new() -> Self {
        GroupStream(zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd"))
    }

    /// The bytes the stream adds for `payload`, flushed.
    fn add(&mut self, payload: &[u8]) -> usize {
        use std::io::Write;
        let before = self.0.get_ref().len();
        self.0.write_all(payload).expect("zstd");
        self.0.flush().expect("zstd");
        self.0.get_ref().len() - before
    }
}

// Long: a flat report, one block per table it prints.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: breakdown DIR (a folder of .bsor files)")?;
    let mut replays = Vec::new();
    let mut bsor_bytes = 0usize;
    let mut paths: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "bsor"))
        .collect();
    paths.sort();
    for path in &paths {
        let bytes = std::fs::read(path)?;
        bsor_bytes += bytes.len();
        replays.push(bsor::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    if bsor_bytes == 0 {
        return Err(format!("no .bsor files in {dir}").into());
    }
    let share = |n: usize| 100.0 * n as f64 / bsor_bytes as f64;
    println!("{} files, {bsor_bytes} bytes of BSOR", replays.len());
    for (name, settings) in [
        ("live", Settings::live as fn(Profile) -> Settings),
        ("archive", Settings::archive),
    ] {
        for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
            let mut parts: BTreeMap<&str, Part> = BTreeMap::new();
            let mut total = 0usize;
            for replay in &replays {
                let stream = transcode::encode_replay(replay, settings(profile));
                total += stream.len();
                let (_, header_len, chunks) =
                    split_stream(&stream).ok_or("the encoder wrote an unreadable stream")?;
                parts.entry("stream header").or_default().header += header_len;
                let (mut frame_z, mut event_z) = (GroupStream::new(), GroupStream::new());
                for c in chunks {
                    let payload = &stream[c.offset + c.header_len..c.offset + c.len];
                    if c.header.kind == ChunkType::Keyframes {
                        (frame_z, event_z) = (GroupStream::new(), GroupStream::new());
                    }
                    let z = match c.header.kind {
                        ChunkType::Keyframes | ChunkType::Frames => Some(&mut frame_z),
                        ChunkType::Events => Some(&mut event_z),
                        _ => None,
                    };
                    let kind = match c.header.kind {
                        ChunkType::Keyframes => "keyframes",
                        ChunkType::Frames => "frames",
                        ChunkType::Events => "events",
                        ChunkType::Trailer => "trailer",
                        ChunkType::Index => "index",
                        _ => "other",
                    };
                    let part = parts.entry(kind).or_default();
                    part.chunks += 1;
                    part.header += c.header_len;
                    part.payload += c.len - c.header_len;
                    if let Some(z) = z {
                        part.zstd_alone += zstd::bulk::compress(payload, 3).expect("zstd").len();
                        part.zstd_stream += z.add(payload);
                    }
                }
            }
            println!("{profile:?} / {name}: {:.2}% of BSOR", share(total));
            for (kind, p) in parts {
                print!(
                    "  {kind:>13}: {:6} chunks, headers {:.2}%, payloads {:.2}%",
                    p.chunks,
                    share(p.header),
                    share(p.payload)
                );
                if p.zstd_alone > 0 {
                    print!(
                        " (through zstd -3: alone {:.2}%, group stream {:.2}%)",
                        share(p.zstd_alone),
                        share(p.zstd_stream)
                    );
                }
                println!();
            }
        }
    }
    Ok(())
}
