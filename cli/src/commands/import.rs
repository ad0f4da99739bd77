//! `import`: a legacy ScoreSaber replay JSON document (proto-spec/legacy-import.md) or an
//! XROR recording to a BSOR file, or to a lossless `.bsors`.

use std::path::Path;

use bsor_stream::bsor;
use bsor_stream::legacy::{self, ImportLimits};

use super::{Failure, Outcome};

/// Reads `input` (a legacy replay JSON document), imports it and writes the BSOR to
/// `output`.
pub fn import(input: &Path, output: &Path) -> Result<Outcome, Failure> {
    let limits = ImportLimits::default();

    // The document's size is checked before it is read whole.
    let size = std::fs::metadata(input).map_err(|e| (input, e))?.len();
    if size > limits.max_json_bytes as u64 {
        return Err(Failure(format!(
            "{}: {size} bytes, over the legacy import limit of {}",
            input.display(),
            limits.max_json_bytes
        )));
    }
    let data = std::fs::read(input).map_err(|e| (input, e))?;
    // XROR is a BSON document (its length first, a zero byte last); JSON starts otherwise.
    let xror = bsor_stream::xror::looks_like_xror(&data)
        || input
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("xror"));
    let replay = if xror {
        bsor_stream::xror::parse(&data).map_err(|e| (input, e))?
    } else {
        legacy::import(&data, &limits).map_err(|e| (input, e))?
    };
    let bytes = if output.extension().is_some_and(|e| e == "bsors") {
        use bsor_stream::stream::{Profile, Settings};
        bsor_stream::transcode::encode_replay(&replay, Settings::archive(Profile::Lossless))
    } else {
        bsor::to_vec(&replay).map_err(|e| (output, e))?
    };
    std::fs::write(output, &bytes).map_err(|e| (output, e))?;
    println!(
        "wrote {} ({} bytes, {} frames, {} note events, {} walls, score {})",
        output.display(),
        bytes.len(),
        replay.frames.len(),
        replay.notes.len(),
        replay.walls.len(),
        replay.info.score
    );
    Ok(Outcome::Done)
}
