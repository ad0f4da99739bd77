//! Where a stream's bytes go: for every profile under the live and the archive settings,
//! the chunks of each type summed over a folder of BSOR files, their headers and payloads
//! as a share of the BSOR bytes:
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
}

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
                for c in chunks {
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
                }
            }
            println!("{profile:?} / {name}: {:.2}% of BSOR", share(total));
            for (kind, p) in parts {
                println!(
                    "  {kind:>13}: {:6} chunks, headers {:.2}%, payloads {:.2}%",
                    p.chunks,
                    share(p.header),
                    share(p.payload)
                );
            }
        }
    }
    Ok(())
}
