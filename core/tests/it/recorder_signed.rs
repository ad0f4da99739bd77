//! A signed recording (integrity.md, §13): the recorder signs on its background thread; the
//! stream file verifies, and so does the classic file at song end, through its signature
//! entry.

use std::time::Duration;

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::integrity::{
    self, verify_bsor, verify_stream, SigningKey, Verdict, ENTRY_KEY,
};
use bsor_stream_core::recorder::{Config, Push, Recorder, SinkState, StartError};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_core::synth;

/// A synthetic song without user data (the recorder's user data is opaque bytes, which
/// have no place for the entry: integrity.md §13.1).
fn song(seed: u64, seconds: f32) -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 90,
    });
    r.trailing.clear();
    r.user_data = None;
    r
}

fn play(rec: &mut Recorder, r: &Replay) {
    let (mut n, mut h) = (0, 0);
    for f in &r.frames {
        while n < r.notes.len() && r.notes[n].event_time <= f.time {
            assert_eq!(rec.push_note(&r.notes[n]), Push::Queued);
            n += 1;
        }
        while h < r.heights.len() && r.heights[h].time <= f.time {
            assert_eq!(rec.push_height(&r.heights[h]), Push::Queued);
            h += 1;
        }
        assert_eq!(rec.push_frame(f), Push::Queued);
    }
    for x in &r.notes[n..] {
        assert_eq!(rec.push_note(x), Push::Queued);
    }
    for x in &r.heights[h..] {
        assert_eq!(rec.push_height(x), Push::Queued);
    }
    for x in &r.walls {
        assert_eq!(rec.push_wall(x), Push::Queued);
    }
    for x in &r.pauses {
        assert_eq!(rec.push_pause(x), Push::Queued);
    }
    if let Some(o) = r.controller_offsets {
        rec.set_controller_offsets(o);
    }
}

#[test]
fn a_signed_recording_verifies_as_stream_and_as_classic_file() {
    let mut r = song(11, 20.0);
    let d = tempfile::Builder::new()
        .prefix("bsor-recorder-signed-")
        .tempdir()
        .unwrap();
    let key = SigningKey::from_bytes(&[0x42; 32]);
    let config = Config {
        stream_file: Some(d.path().join("song.bsors")),
        classic_file: Some(d.path().join("song.bsor")),
        signing_key: Some(key.clone()),
        ..Config::default()
    };
    let mut rec = Recorder::start(r.info.clone(), config).unwrap();
    play(&mut rec, &r);
    assert!(rec.finish(r.info.clone()));
    let st = rec
        .wait(Duration::from_secs(30))
        .expect("the recorder ends");
    assert_eq!(
        (st.stream_file, st.classic),
        (SinkState::Done, SinkState::Done),
        "{st:?}"
    );

    let stream = std::fs::read(d.path().join("song.bsors")).unwrap();
    let rep = verify_stream(&stream);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.signer_key, Some(key.verifying_key().to_bytes()));
    assert!(rep.checkpoints >= 20, "{}", rep.checkpoints);

    let classic = std::fs::read(d.path().join("song.bsor")).unwrap();
    let rep = verify_bsor(&classic);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.signer_key, Some(key.verifying_key().to_bytes()));
    // Without the entry, the classic file is the recording, with the user data it was given.
    let mut back = bsor::parse(&classic).unwrap();
    assert!(classic
        .windows(ENTRY_KEY.len())
        .any(|w| w == ENTRY_KEY.as_bytes()));
    integrity::take_entry(&mut back).unwrap().expect("an entry");
    r.info = back.info.clone();
    assert_eq!(bsor::to_vec(&back).unwrap(), bsor::to_vec(&r).unwrap());
}

#[test]
fn a_lossy_recording_with_a_key_does_not_start() {
    let config = Config {
        settings: Settings::live(Profile::Compact),
        signing_key: Some(SigningKey::from_bytes(&[0x42; 32])),
        ..Config::default()
    };
    let r = song(12, 1.0);
    assert!(matches!(
        Recorder::start(r.info.clone(), config),
        Err(StartError::Sign(_))
    ));
}
