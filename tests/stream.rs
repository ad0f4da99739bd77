//! The stream format end to end: exact round trips, ratios, error bounds, damage.

mod common;

use bsor_stream::bsor::{self, Replay};
use bsor_stream::stream::{accuracy, Profile, Settings};
use bsor_stream::synth;
use bsor_stream::transcode;

fn events_equal(a: &Replay, b: &Replay) -> bool {
    let bytes = |r: &Replay| {
        let events = Replay {
            info: Default::default(),
            frames: vec![],
            ..r.clone()
        };
        bsor::to_vec(&events).unwrap()
    };
    bytes(a) == bytes(b)
}

#[test]
fn corpus_round_trips_and_ratios() {
    let files = common::corpus_files();
    if files.is_empty() {
        return;
    }
    for (label, make) in [
        ("live", Settings::live as fn(Profile) -> Settings),
        ("archive", Settings::archive),
    ] {
        for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
            let settings = make(profile);
            let (mut bsor_total, mut stream_total) = (0usize, 0usize);
            let (mut max_pos, mut max_rot) = (0f64, 0f64);
            for (name, bytes) in &files {
                let r = bsor::parse(bytes).unwrap();
                let s = transcode::encode_replay(&r, settings);
                let (back, rec) = transcode::decode_replay(&s).unwrap();
                assert!(rec.complete, "{name} {label} {profile:?}: {rec:?}");
                assert!(events_equal(&r, &back), "{name}: events exact");
                assert_eq!(back.info, r.info);
                assert_eq!(bsor::replay_score(&back), i64::from(r.info.score));
                if profile == Profile::Lossless {
                    assert!(
                        bsor::to_vec(&back).unwrap() == *bytes,
                        "{name} {label}: exact"
                    );
                }
                for (o, d) in r.frames.iter().zip(&back.frames) {
                    assert_eq!(o.time.to_bits(), d.time.to_bits());
                    assert_eq!(o.fps, d.fps);
                    for (po, pd) in [
                        (&o.head, &d.head),
                        (&o.left_hand, &d.left_hand),
                        (&o.right_hand, &d.right_hand),
                    ] {
                        if let Some(e) = accuracy::position_error_mm(&po.position, &pd.position) {
                            max_pos = max_pos.max(e);
                        }
                        if let Some(e) = accuracy::rotation_error_deg(&po.rotation, &pd.rotation) {
                            max_rot = max_rot.max(e);
                        }
                    }
                }
                bsor_total += bytes.len();
                stream_total += s.len();
            }
            let ratio = stream_total as f64 / bsor_total as f64;
            eprintln!("{label} {profile:?}: ratio {ratio:.4}, max pos {max_pos:.4} mm, max rot {max_rot:.4} deg");
            let (pos_bound, rot_bound) = match profile {
                Profile::Lossless => (0.0, 0.0),
                Profile::Fine => (0.1, 0.02),
                Profile::Compact => (1.0, 0.2),
            };
            assert!(max_pos <= pos_bound && max_rot <= rot_bound);
        }
    }
}

#[test]
fn synthetic_replay_round_trips_in_every_profile() {
    let r = synth::replay(synth::Settings {
        seed: 3,
        seconds: 30.0,
        fps: 90,
    });
    let bytes = bsor::to_vec(&r).unwrap();
    for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
        let s = transcode::encode_replay(&r, Settings::live(profile));
        let (back, rec) = transcode::decode_replay(&s).unwrap();
        assert!(rec.complete);
        assert!(events_equal(&r, &back));
        if profile == Profile::Lossless {
            assert!(bsor::to_vec(&back).unwrap() == bytes);
        }
    }
}
