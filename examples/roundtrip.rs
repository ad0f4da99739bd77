//! Reads a classic BSOR (or makes a synthetic one), streams it in every profile, decodes
//! the streams and prints what each kept:
//!
//! ```sh
//! cargo run --release --example roundtrip -- [REPLAY.bsor]
//! ```

use bsor_stream::bsor;
use bsor_stream::stream::{accuracy, Profile, Settings};
use bsor_stream::{synth, transcode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bytes = match std::env::args().nth(1) {
        Some(path) => std::fs::read(path)?,
        None => bsor::to_vec(&synth::replay(synth::Settings::default()))?,
    };
    let replay = bsor::parse(&bytes)?;
    println!(
        "{} frames, {} note events, {} bytes of BSOR",
        replay.frames.len(),
        replay.notes.len(),
        bytes.len()
    );
    for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
        let stream = transcode::encode_replay(&replay, Settings::live(profile));
        let (back, recovery) = transcode::decode_replay(&stream)?;
        let worst = replay
            .frames
            .iter()
            .zip(&back.frames)
            .filter_map(|(a, b)| {
                accuracy::position_error_mm(&a.right_hand.position, &b.right_hand.position)
            })
            .fold(0.0f64, f64::max);
        println!(
            "{profile:?}: {} bytes ({:.1}% of BSOR), complete {}, identical BSOR {}, worst right-hand error {worst:.3} mm",
            stream.len(),
            100.0 * stream.len() as f64 / bytes.len() as f64,
            recovery.complete,
            bsor::to_vec(&back)? == bytes,
        );
    }
    Ok(())
}
