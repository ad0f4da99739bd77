//! The stream format end to end: exact round trips, ratios, error bounds, damage.

use crate::common;

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::stream::{accuracy, Profile, Settings};
use bsor_stream_core::synth;
use bsor_stream_core::transcode;
use bsor_stream_core::transcode::SinkEnd;

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
                Profile::Custom(c) => (c.bounds().0, 72.0 / f64::from(c.rotation_steps())),
            };
            assert!(max_pos <= pos_bound && max_rot <= rot_bound);
            // The format's size targets, summed over the corpus.
            let target = match (label, profile) {
                ("live", Profile::Lossless) => 0.65,
                ("live", Profile::Fine) => 0.25,
                ("live", Profile::Compact) => 0.18,
                (_, Profile::Lossless) => 0.58,
                (_, Profile::Fine) => 0.20,
                (_, Profile::Compact) => 0.14,
                (_, Profile::Custom(_)) => 1.0,
            };
            assert!(
                ratio <= target,
                "{label} {profile:?}: {ratio:.4} of BSOR, target {target}"
            );
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

fn small_stream(profile: Profile) -> (Replay, Vec<u8>) {
    let r = synth::replay(synth::Settings {
        seed: 5,
        seconds: 12.0,
        fps: 60,
    });
    let s = transcode::encode_replay(&r, Settings::live(profile));
    (r, s)
}

/// The chunks of a stream: (offset, total length, type byte, first, count).
fn chunks(s: &[u8]) -> Vec<(usize, usize, u8, u32, u32)> {
    let (_, _, spans) = bsor_stream_core::stream::split_stream(s).unwrap();
    spans
        .iter()
        .map(|c| {
            (
                c.offset,
                c.len,
                c.header.kind.byte(),
                c.header.first,
                c.header.count,
            )
        })
        .collect()
}

#[test]
fn a_truncated_stream_decodes_every_chunk_before_the_cut() {
    let (r, s) = small_stream(Profile::Lossless);
    let list = chunks(&s);
    for cut in (0..s.len()).step_by(97).chain([s.len() - 1, s.len() - 17]) {
        match transcode::decode_replay(&s[..cut]) {
            Err(e) => {
                // Only a cut inside the stream header stops everything.
                assert!(cut < list[0].0, "cut {cut}: {e}");
                continue;
            }
            Ok((back, rec)) => {
                let whole: u32 = list
                    .iter()
                    .filter(|c| c.0 + c.1 <= cut && matches!(c.2, 1 | 2))
                    .map(|c| c.4)
                    .sum();
                assert_eq!(back.frames.len() as u32, whole, "cut {cut}");
                for (a, b) in back.frames.iter().zip(&r.frames) {
                    assert_eq!(bsor::encode_frame(a), bsor::encode_frame(b));
                }
                assert!(!rec.complete, "cut {cut}");
            }
        }
    }
}

#[test]
fn a_damaged_chunk_is_reported_and_decoding_resumes_at_the_next_keyframe() {
    let (r, s) = small_stream(Profile::Lossless);
    let list = chunks(&s);
    // The third frame chunk of the second keyframe group.
    let keys: Vec<usize> = (0..list.len()).filter(|&i| list[i].2 == 1).collect();
    assert!(keys.len() >= 4, "{keys:?}");
    let victim = list[keys[1]..keys[2]]
        .iter()
        .filter(|c| c.2 == 2)
        .nth(1)
        .copied()
        .unwrap();
    let mut bad = s.clone();
    bad[victim.0 + victim.1 - 3] ^= 0x40;
    let (back, rec) = transcode::decode_replay(&bad).unwrap();
    assert!(!rec.complete);
    assert!(
        rec.damage.iter().any(|d| d.what().contains("CRC")),
        "{:?}",
        rec.damage
    );
    // Lost: the damaged chunk and the rest of its group; everything else decodes exactly.
    let group_end = list[keys[2]].3;
    let lost = group_end - victim.3;
    assert_eq!(back.frames.len() as u32, r.frames.len() as u32 - lost);
    let mut expected: Vec<_> = r.frames[..victim.3 as usize].to_vec();
    expected.extend_from_slice(&r.frames[group_end as usize..]);
    for (a, b) in back.frames.iter().zip(&expected) {
        assert_eq!(bsor::encode_frame(a), bsor::encode_frame(b));
    }
    // A damaged chunk header: the reader finds the next chunk by its sync marker.
    let mut bad = s.clone();
    let first_frames = list.iter().find(|c| c.2 == 2).unwrap();
    bad[first_frames.0 + 3] ^= 0xff;
    let (back, rec) = transcode::decode_replay(&bad).unwrap();
    assert!(!rec.complete);
    assert!(back.frames.len() < r.frames.len() && back.frames.len() > r.frames.len() / 2);
    // Garbage between chunks.
    let mut bad = s[..list[keys[2]].0].to_vec();
    bad.extend_from_slice(&[0xB5, 1, 2, 3, 0xB5, 9, 9]);
    bad.extend_from_slice(&s[list[keys[2]].0..]);
    let (back, rec) = transcode::decode_replay(&bad).unwrap();
    assert!(!rec.damage.is_empty());
    assert_eq!(
        back.frames.len(),
        r.frames.len(),
        "nothing lost to garbage between chunks"
    );
}

#[test]
fn unknown_chunk_types_are_skipped_and_critical_ones_stop_the_reader() {
    use bsor_stream_core::stream::{ChunkHeader, ChunkType, StreamError};
    let (r, s) = small_stream(Profile::Fine);
    let list = chunks(&s);
    let at = list[3].0;
    for (kind, critical) in [(0x42u8, false), (0xC2, true)] {
        // Insert a chunk of that type after the third, numbering the chunks after it on.
        let mut with = s[..at].to_vec();
        let seq_here = ChunkHeader::parse_at(&s[at..]).unwrap().0.seq;
        ChunkHeader::new(ChunkType::from_byte(kind), seq_here, 0, 0, 0.0)
            .write_to(b"future data", &mut with);
        for &(c_at, len, _, _, _) in list.iter().filter(|c| c.0 >= at) {
            let (h, hlen) = ChunkHeader::parse_at(&s[c_at..]).unwrap();
            let payload = &s[c_at + hlen..c_at + len];
            ChunkHeader::new(h.kind, h.seq + 1, h.first, h.count, h.t0)
                .write_to(payload, &mut with);
        }
        let end = list.last().map(|c| c.0 + c.1).unwrap();
        with.extend_from_slice(&s[end..]); // the footer
        let result = transcode::decode_replay(&with);
        if critical {
            assert!(matches!(
                result,
                Err(StreamError::CriticalChunk { kind: 0xC2, .. })
            ));
        } else {
            let (back, rec) = result.unwrap();
            assert_eq!(back.frames.len(), r.frames.len());
            assert!(rec.complete, "{rec:?}");
        }
    }
}

/// Format.md: a critical chunk stops the reader. Once the decoder has returned that error,
/// every further call returns it again; nothing after the chunk is ever decoded.
#[test]
fn after_a_critical_chunk_the_decoder_stays_stopped() {
    use bsor_stream_core::stream::{ChunkHeader, ChunkType, StreamDecoder, StreamError};
    let (_, s) = small_stream(Profile::Fine);
    let list = chunks(&s);
    let at = list[3].0;
    let mut with = s[..at].to_vec();
    let seq_here = ChunkHeader::parse_at(&s[at..]).unwrap().0.seq;
    ChunkHeader::new(ChunkType::from_byte(0xC2), seq_here, 0, 0, 0.0)
        .write_to(b"future data", &mut with);
    // The rest of the stream as it was: well-formed chunks the reader must not reach.
    with.extend_from_slice(&s[at..]);
    for piece in [with.len(), 7] {
        let mut d = StreamDecoder::new();
        let mut first = None;
        let mut pulls = 0;
        for p in with.chunks(piece) {
            d.push(p);
            loop {
                match d.next_item() {
                    Ok(Some(ev)) => {
                        assert!(first.is_none(), "decoded past a critical chunk: {ev:?}");
                    }
                    Ok(None) => break,
                    Err(e) => {
                        assert!(
                            matches!(e, StreamError::CriticalChunk { kind: 0xC2, .. }),
                            "{e}"
                        );
                        match &first {
                            None => first = Some(e),
                            Some(f) => assert_eq!(&e, f, "a different error after the stop"),
                        }
                        pulls += 1;
                        if pulls > 3 {
                            break;
                        }
                    }
                }
            }
        }
        d.finish();
        for _ in 0..3 {
            assert_eq!(d.next_item().as_ref().err(), first.as_ref());
        }
        assert!(
            first.is_some(),
            "piece {piece}: the critical chunk was not reported"
        );
    }
}

/// Errors and damage are typed: they name what went wrong and where (the chunk's sequence
/// number and type, the offset), and read as the decoder's messages always have.
#[test]
fn errors_and_damage_are_typed_and_say_where() {
    use bsor_stream_core::stream::{ChunkHeader, ChunkType, DamageKind, HeaderError, StreamError};
    let (_, s) = small_stream(Profile::Lossless);
    let mut bad = s.clone();
    bad[0] = b'X';
    let err = transcode::decode_replay(&bad).unwrap_err();
    assert_eq!(err, StreamError::Header(HeaderError::BadMagic));
    assert_eq!(
        err.to_string(),
        "stream header at byte 0: not a BSOR stream (bad magic)"
    );
    assert_eq!(
        transcode::decode_replay(&s[..5]).unwrap_err(),
        StreamError::Header(HeaderError::Truncated)
    );
    // The last payload byte of the first delta frame chunk.
    let &(at, len, ..) = chunks(&s).iter().find(|c| c.2 == 2).unwrap();
    let seq = ChunkHeader::parse_at(&s[at..]).unwrap().0.seq;
    let mut bad = s.clone();
    bad[at + len - 1] ^= 0xff;
    let (_, rec) = transcode::decode_replay(&bad).unwrap();
    let d = &rec.damage[0];
    assert_eq!((d.offset, d.skipped_bytes), (at as u64, len as u64));
    assert_eq!(
        d.kind,
        DamageKind::PayloadCrc {
            seq,
            kind: ChunkType::Frames
        }
    );
    assert_eq!(d.what(), "chunk payload CRC mismatch");
    assert!(matches!(
        rec.damage[1].kind,
        DamageKind::FramesWithoutKeyframe { seq: next } if next == seq + 1
    ));
}

#[test]
fn any_piece_sizes_decode_the_same() {
    use bsor_stream_core::stream::StreamDecoder;
    let (_, s) = small_stream(Profile::Compact);
    let all = |piece: usize| {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for p in s.chunks(piece) {
            d.push(p);
            while let Some(ev) = d.next_item().unwrap() {
                out.push(format!("{ev:?}"));
            }
        }
        d.finish();
        while let Some(ev) = d.next_item().unwrap() {
            out.push(format!("{ev:?}"));
        }
        out
    };
    let whole = all(s.len());
    assert!(whole.last().is_some_and(|e| e == "End"));
    for piece in [1, 7, 64, 1000] {
        assert_eq!(all(piece), whole, "piece {piece}");
    }
}

#[test]
fn events_are_read_through_the_index_without_touching_pose_data() {
    use std::io::{Cursor, Read, Seek, SeekFrom};
    struct Spy<'a> {
        inner: Cursor<&'a [u8]>,
        read: Vec<(u64, u64)>,
    }
    impl Read for Spy<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let at = self.inner.position();
            let n = self.inner.read(buf)?;
            self.read.push((at, at + n as u64));
            Ok(n)
        }
    }
    impl Seek for Spy<'_> {
        fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(pos)
        }
    }
    let (r, s) = small_stream(Profile::Lossless);
    let mut spy = Spy {
        inner: Cursor::new(&s),
        read: Vec::new(),
    };
    let (_, events) = transcode::read_events(&mut spy).unwrap().unwrap();
    assert!(events_equal(
        &r,
        &Replay {
            notes: events.notes.records,
            walls: events.walls.records,
            heights: events.heights.records,
            pauses: events.pauses.records,
            ..r.clone()
        }
    ));
    for (at, len, kind, _, _) in chunks(&s) {
        if matches!(kind, 1 | 2) {
            // No byte of a frame chunk was read.
            let chunk = (at as u64, (at + len) as u64);
            for &(a, b) in &spy.read {
                assert!(
                    b <= chunk.0 || a >= chunk.1,
                    "read {a}..{b} overlaps frames at {chunk:?}"
                );
            }
        }
    }
}

#[test]
fn a_span_decodes_from_the_keyframe_before_it() {
    let (r, s) = small_stream(Profile::Lossless);
    let (span, rec) = transcode::decode_span(&s, 4.2, 7.5).unwrap();
    assert!(rec.complete);
    let want: Vec<_> = r
        .frames
        .iter()
        .filter(|f| f.time >= 4.2 && f.time <= 7.5)
        .collect();
    assert_eq!(span.frames.len(), want.len());
    for (a, b) in span.frames.iter().zip(want) {
        assert_eq!(bsor::encode_frame(a), bsor::encode_frame(b));
    }
    assert!(span
        .notes
        .iter()
        .all(|n| n.event_time >= 4.2 && n.event_time <= 7.5));
    assert_eq!(
        span.notes.len(),
        r.notes
            .iter()
            .filter(|n| n.event_time >= 4.2 && n.event_time <= 7.5)
            .count()
    );
    // Fewer frame bytes were decoded than the whole stream holds.
    assert!(
        rec.stats.frame_bytes < s.len() as u64 / 2,
        "{:?}",
        rec.stats
    );
}

#[test]
fn pipe_transcoding_emits_chunks_as_frames_arrive() {
    use bsor_stream_core::transcode::BsorToStream;
    let r = synth::replay(synth::Settings {
        seed: 8,
        seconds: 20.0,
        fps: 90,
    });
    let bytes = bsor::to_vec(&r).unwrap();
    let mut t = BsorToStream::new(Settings::live(Profile::Lossless));
    let mut out = Vec::new();
    let half = bytes.len() / 2;
    t.push(&bytes[..half]).unwrap();
    out.extend(t.take_output());
    // Half the frames in, most of their chunks are out already.
    assert!(
        out.len() > half / 4,
        "{} bytes out for {half} in",
        out.len()
    );
    t.push(&bytes[half..]).unwrap();
    t.finish().unwrap();
    out.extend(t.take_output());
    let (back, rec) = transcode::decode_replay(&out).unwrap();
    assert!(rec.complete);
    assert!(bsor::to_vec(&back).unwrap() == bytes);
}

#[test]
fn stream_to_bsor_through_a_seekable_sink() {
    use bsor_stream_core::stream::{StreamDecoder, StreamItem};
    use bsor_stream_core::transcode::BsorSink;
    let (r, s) = small_stream(Profile::Lossless);
    let mut d = StreamDecoder::new();
    let mut sink = None;
    for piece in s.chunks(333) {
        d.push(piece);
        while let Some(ev) = d.next_item().unwrap() {
            if let StreamItem::Header(h) = &ev {
                sink = Some(BsorSink::new(std::io::Cursor::new(Vec::new()), h).unwrap());
            }
            sink.as_mut().unwrap().apply(ev).unwrap();
        }
    }
    d.finish();
    while let Some(ev) = d.next_item().unwrap() {
        sink.as_mut().unwrap().apply(ev).unwrap();
    }
    let out = match sink.unwrap().finish().unwrap() {
        SinkEnd::Complete(w) => w.into_inner(),
        other => panic!("the info did not change: {other:?}"),
    };
    assert!(out == bsor::to_vec(&r).unwrap());
}

#[test]
fn a_final_info_of_another_length_relocates_the_head_and_loses_nothing() {
    use bsor_stream_core::stream::{StreamDecoder, StreamEncoder, StreamItem};
    use bsor_stream_core::transcode::BsorSink;
    let mut r = synth::replay(synth::Settings {
        seed: 4,
        seconds: 2.0,
        fps: 60,
    });
    let mut start = r.info.clone();
    start.modifiers = "FS".into();
    r.info.modifiers = "FS,NF".into();
    let mut enc = StreamEncoder::new(start, Settings::live(Profile::Lossless));
    for f in &r.frames {
        enc.push_frame(f);
    }
    for n in &r.notes {
        enc.push_note(*n);
    }
    enc.finish(
        r.info.clone(),
        r.controller_offsets,
        r.user_data.clone(),
        Vec::new(),
    );
    let stream = enc.take_output();
    let mut d = StreamDecoder::new();
    d.push(&stream);
    d.finish();
    let mut sink = None;
    while let Some(item) = d.next_item().unwrap() {
        if let StreamItem::Header(h) = &item {
            sink = Some(BsorSink::new(std::io::Cursor::new(Vec::new()), h).unwrap());
        }
        sink.as_mut().unwrap().apply(item).unwrap();
    }
    let SinkEnd::Relocate { w, head, skip } = sink.unwrap().finish().unwrap() else {
        panic!("the info grew by 3 bytes: the head must move");
    };
    let mut out = head;
    out.extend_from_slice(&w.into_inner()[skip as usize..]);
    let back = bsor::parse(&out).unwrap();
    assert_eq!(back.info.modifiers.as_str(), Some("FS,NF"));
    assert_eq!(back.frames.len(), r.frames.len());
    assert_eq!(back.notes.len(), r.notes.len());
}

#[test]
fn a_device_at_rest_and_many_identical_events_decode_whole() {
    // All-zero poses compress to almost nothing: the coder reads far past its bytes.
    let mut r = synth::replay(synth::Settings {
        seed: 9,
        seconds: 2.0,
        fps: 60,
    });
    for f in &mut r.frames {
        f.head = Default::default();
        f.left_hand = Default::default();
        f.right_hand = Default::default();
    }
    r.heights = (0..3000)
        .map(|_| bsor::Height {
            height: 1.5,
            time: 0.5,
        })
        .collect();
    let bytes = bsor::to_vec(&r).unwrap();
    for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
        for settings in [Settings::live(profile), Settings::archive(profile)] {
            let s = transcode::encode_replay(&r, settings);
            let (back, rec) = transcode::decode_replay(&s).unwrap();
            assert!(rec.complete, "{profile:?}: {rec:?}");
            assert_eq!(back.frames.len(), r.frames.len());
            assert_eq!(back.heights.len(), 3000);
            if profile == Profile::Lossless {
                assert!(bsor::to_vec(&back).unwrap() == bytes);
            }
        }
    }
}

#[test]
fn non_finite_values_predict_portably_and_round_trip() {
    let mut r = synth::replay(synth::Settings {
        seed: 10,
        seconds: 3.0,
        fps: 30,
    });
    // inf, inf: the extrapolation 2·inf − inf is NaN, whose bits differ by platform.
    for f in &mut r.frames[5..9] {
        f.head.position.x = f32::INFINITY;
        f.left_hand.rotation.y = f32::NEG_INFINITY;
        f.right_hand.position.z = f32::from_bits(0x7fc0_0123);
    }
    r.notes[0].event_time = f32::INFINITY;
    r.notes[0].spawn_time = f32::INFINITY;
    let bytes = bsor::to_vec(&r).unwrap();
    for profile in [Profile::Lossless, Profile::Fine] {
        let s = transcode::encode_replay(&r, Settings::live(profile));
        let (back, rec) = transcode::decode_replay(&s).unwrap();
        assert!(rec.complete);
        if profile == Profile::Lossless {
            assert!(bsor::to_vec(&back).unwrap() == bytes);
        }
        assert_eq!(
            back.frames[6].head.position.x,
            f32::INFINITY,
            "escaped exactly"
        );
    }
}

#[test]
fn a_footer_whose_offset_looks_like_a_sync_marker_still_ends_the_stream() {
    let (_, s) = small_stream(Profile::Lossless);
    let mut forged = s[..s.len() - 16].to_vec();
    let offset: u64 = 0x7B5; // its first byte is the sync marker
    let mut f = [0u8; 16];
    f[..8].copy_from_slice(&offset.to_le_bytes());
    let crc = crc32fast::hash(&f[..8]);
    f[8..12].copy_from_slice(&crc.to_le_bytes());
    f[12..].copy_from_slice(b"BSRE");
    forged.extend_from_slice(&f);
    let (_, rec) = transcode::decode_replay(&forged).unwrap();
    assert!(rec.damage.is_empty(), "{:?}", rec.damage);
    assert!(rec.complete);
}

#[test]
fn a_lost_keyframe_loses_its_groups_events_instead_of_garbling_them() {
    let (r, s) = small_stream(Profile::Lossless);
    let list = chunks(&s);
    // A keyframe chunk after which the same group has an event chunk.
    let (ki, _) = list
        .iter()
        .enumerate()
        .filter(|(_, c)| c.2 == 1)
        .find(|(i, _)| {
            list[i + 1..]
                .iter()
                .take_while(|c| c.2 != 1)
                .any(|c| c.2 == 3)
        })
        .expect("a group with events");
    let key = list[ki];
    let mut bad = s.clone();
    bad[key.0 + key.1 - 2] ^= 0x10;
    let (back, rec) = transcode::decode_replay(&bad).unwrap();
    assert!(!rec.complete);
    assert!(rec.stats.events_lost > 0, "{:?}", rec.stats);
    // Whatever events came through are the original ones, in place.
    let n = back.notes.len().min(r.notes.len());
    let original: Vec<_> = r.notes.iter().map(|x| format!("{x:?}")).collect();
    for note in &back.notes[..n] {
        assert!(
            original.contains(&format!("{note:?}")),
            "garbled note {note:?}"
        );
    }
}

/// Events of a stream fed in pieces of `piece` bytes, as text (NaN-proof), and the error.
fn events_in_pieces(s: &[u8], piece: usize) -> (Vec<String>, Option<String>) {
    use bsor_stream_core::stream::StreamDecoder;
    let mut d = StreamDecoder::new();
    let mut out = Vec::new();
    for p in s.chunks(piece.max(1)) {
        d.push(p);
        loop {
            match d.next_item() {
                Ok(Some(ev)) => out.push(format!("{ev:?}")),
                Ok(None) => break,
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }
    d.finish();
    loop {
        match d.next_item() {
            Ok(Some(ev)) => out.push(format!("{ev:?}")),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e.to_string())),
        }
    }
}

#[test]
fn junk_before_a_footer_or_between_chunks_reads_the_same_in_any_pieces() {
    let (_, s) = small_stream(Profile::Fine);
    let list = chunks(&s);
    let footer_at = s.len() - 16;
    let mut cases = Vec::new();
    // Junk right before the footer.
    let mut a = s[..footer_at].to_vec();
    a.extend_from_slice(&[1, 2, 3, 0xB5, 9, 8, 7]);
    a.extend_from_slice(&s[footer_at..]);
    cases.push(a);
    // Junk (with a lone first sync byte) between two chunks, and after the footer.
    let mid = list[list.len() / 2].0;
    let mut b = s[..mid].to_vec();
    b.extend_from_slice(&[0xB5, 0, 0xB5, 0xB5, 0x11, 0x22]);
    b.extend_from_slice(&s[mid..]);
    cases.push(b);
    // The fuzzer's own findings, when its regressions are at hand.
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/stream_decode");
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        // The fuzz target's first byte picks piece sizes; the stream follows it.
        let data = std::fs::read(e.path()).unwrap();
        cases.push(data.get(1..).unwrap_or_default().to_vec());
    }
    for (i, case) in cases.iter().enumerate() {
        let whole = events_in_pieces(case, case.len());
        for piece in [1, 2, 5, 16, 17, 64] {
            assert_eq!(
                events_in_pieces(case, piece),
                whole,
                "case {i}, pieces of {piece}"
            );
        }
        if i < 2 {
            assert!(whole.0.last().is_some_and(|e| e == "End"), "case {i}");
            let damage: Vec<_> = whole.0.iter().filter(|e| e.starts_with("Damage")).collect();
            assert_eq!(damage.len(), 1, "case {i}: one stretch of junk: {damage:?}");
        }
    }
}

/// A few hundred bytes in which every other byte or so is the sync marker `B5`, with some
/// header-like runs (a type byte and small varints after it) and a real chunk header with
/// one byte changed: every candidate fails its header CRC.
fn sync_heavy_junk(s: &[u8], near: (usize, usize), seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    let mut junk = Vec::new();
    while junk.len() < 400 {
        let r = next();
        match r % 8 {
            0..=3 => junk.push(0xB5),
            4 => junk.extend_from_slice(&[0xB5, 1 + (r >> 8) as u8 % 5, (r >> 16) as u8 & 0x7f, 0]),
            _ => junk.push((r >> 8) as u8),
        }
    }
    // A copy of a real chunk header, damaged in its t0.
    let mut header = s[near.0..near.0 + near.1].to_vec();
    header[6] ^= 0x01;
    junk.extend_from_slice(&header);
    // Candidates whose headers run into the real chunk after the junk.
    junk.extend_from_slice(&[0xB5, 0xB5, 0x02, 0xB5]);
    junk
}

#[test]
fn a_one_byte_sync_marker_resynchronises_after_junk_full_of_it() {
    let (r, s) = small_stream(Profile::Lossless);
    let (_, _, spans) = bsor_stream_core::stream::split_stream(&s).unwrap();
    // Before a frames chunk in the middle of a group, and before a keyframe chunk.
    let frames_at = spans[spans.len() / 2..]
        .iter()
        .find(|c| c.header.kind.byte() == 2)
        .unwrap();
    let key_at = spans[1..]
        .iter()
        .find(|c| c.header.kind.byte() == 1)
        .unwrap();
    for (i, at) in [frames_at, key_at].into_iter().enumerate() {
        let junk = sync_heavy_junk(&s, (at.offset, at.header_len), 7 + i as u32);
        assert!(junk.iter().filter(|&&b| b == 0xB5).count() > 150);
        let mut bad = s[..at.offset].to_vec();
        bad.extend_from_slice(&junk);
        bad.extend_from_slice(&s[at.offset..]);
        let (back, rec) = transcode::decode_replay(&bad).unwrap();
        // One stretch, exactly the junk; every chunk after it decodes, nothing is lost.
        assert_eq!(rec.damage.len(), 1, "{:?}", rec.damage);
        let d = &rec.damage[0];
        assert_eq!(d.what(), "bytes that are not a chunk");
        assert_eq!(
            (d.offset, d.skipped_bytes),
            (at.offset as u64, junk.len() as u64)
        );
        assert_eq!(rec.stats.chunks as usize, spans.len());
        assert_eq!(back.frames.len(), r.frames.len());
        for (a, b) in back.frames.iter().zip(&r.frames) {
            assert_eq!(bsor::encode_frame(a), bsor::encode_frame(b));
        }
        assert!(events_equal(&r, &back));
        // Whatever the piece sizes.
        let whole = events_in_pieces(&bad, bad.len());
        assert!(whole.1.is_none() && whole.0.last().is_some_and(|e| e == "End"));
        for piece in [1, 2, 3, 7, 16, 17, 18, 64, 255, 1000] {
            assert_eq!(
                events_in_pieces(&bad, piece),
                whole,
                "case {i}, pieces of {piece}"
            );
        }
    }
}

/// Every item a decoder yields, frames written as BSOR records (`bsor_records` or not),
/// with a frame chunk's frames as one run: (first index, records).
fn items_as_records(stream: &[u8], records: bool, piece: usize) -> Vec<String> {
    use bsor_stream_core::stream::{StreamDecoder, StreamItem};
    let mut d = StreamDecoder::new();
    if records {
        d = d.bsor_records();
    }
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u32, Vec<u8>)> = None;
    let flush = |run: &mut Option<(u32, Vec<u8>)>, out: &mut Vec<String>| {
        if let Some((first, bytes)) = run.take() {
            out.push(format!("frames {first} {}", digest(&bytes)));
        }
    };
    let take = |d: &mut StreamDecoder, run: &mut Option<(u32, Vec<u8>)>, out: &mut Vec<String>| loop {
        match d.next_item() {
            Ok(Some(StreamItem::Frame { index, frame })) => {
                let bytes = bsor::encode_frame(&frame);
                match run {
                    Some((first, b))
                        if *first as usize + b.len() / bsor::FRAME_SIZE == index as usize =>
                    {
                        b.extend_from_slice(&bytes)
                    }
                    _ => {
                        flush(run, out);
                        *run = Some((index, bytes.to_vec()));
                    }
                }
            }
            Ok(Some(StreamItem::FrameRecords { first, records })) => {
                assert_eq!(records.len() % bsor::FRAME_SIZE, 0);
                match run {
                    Some((f, b)) if *f as usize + b.len() / bsor::FRAME_SIZE == first as usize => {
                        b.extend_from_slice(&records)
                    }
                    _ => {
                        flush(run, out);
                        *run = Some((first, records));
                    }
                }
            }
            Ok(Some(item)) => {
                flush(run, out);
                out.push(format!("{item:?}"));
            }
            Ok(None) => return,
            Err(e) => {
                flush(run, out);
                out.push(format!("error {e}"));
                return;
            }
        }
    };
    for p in stream.chunks(piece) {
        d.push(p);
        take(&mut d, &mut run, &mut out);
    }
    d.finish();
    take(&mut d, &mut run, &mut out);
    flush(&mut run, &mut out);
    out
}

fn digest(bytes: &[u8]) -> String {
    format!("{} bytes {:08x}", bytes.len(), crc32fast::hash(bytes))
}

#[test]
fn bsor_records_are_the_frames_bytes_in_every_profile_and_through_damage() {
    let mut r = synth::replay(synth::Settings {
        seed: 12,
        seconds: 20.0,
        fps: 90,
    });
    for f in &mut r.frames[40..44] {
        f.head.position.x = f32::INFINITY;
        f.right_hand.rotation.w = f32::from_bits(0x7fc0_0123);
    }
    for profile in [Profile::Lossless, Profile::Fine, Profile::Compact] {
        for settings in [Settings::live(profile), Settings::archive(profile)] {
            let s = transcode::encode_replay(&r, settings);
            let plain = items_as_records(&s, false, s.len());
            assert!(
                plain.iter().any(|i| i.starts_with("frames 0 ")),
                "{profile:?}"
            );
            assert_eq!(items_as_records(&s, true, s.len()), plain, "{profile:?}");
            assert_eq!(
                items_as_records(&s, true, 777),
                plain,
                "{profile:?} in pieces"
            );
            // A damaged frame chunk mid-stream: the same damage, the same frames after it.
            let mut bad = s.clone();
            let framed: Vec<_> = chunks(&s)
                .into_iter()
                .filter(|c| {
                    use bsor_stream_core::stream::ChunkType;
                    [ChunkType::Frames.byte(), ChunkType::Keyframes.byte()].contains(&c.2)
                })
                .collect();
            assert!(framed.len() >= 2, "{profile:?}");
            let (at, len, ..) = framed[framed.len() / 2];
            bad[at + len - 2] ^= 0x40;
            let plain = items_as_records(&bad, false, bad.len());
            assert!(plain.iter().any(|i| i.starts_with("Damage")), "{profile:?}");
            assert_eq!(
                items_as_records(&bad, true, bad.len()),
                plain,
                "{profile:?} damaged"
            );
        }
    }
    // Lossless records are the BSOR's own frame bytes, whole.
    let s = transcode::encode_replay(&r, Settings::archive(Profile::Lossless));
    let mut d = bsor_stream_core::stream::StreamDecoder::new().bsor_records();
    d.push(&s);
    d.finish();
    let mut records = Vec::new();
    while let Some(item) = d.next_item().unwrap() {
        if let bsor_stream_core::stream::StreamItem::FrameRecords { records: r, .. } = item {
            records.extend(r);
        }
    }
    let frames: Vec<u8> = r.frames.iter().flat_map(bsor::encode_frame).collect();
    assert!(
        records == frames,
        "the lossless records differ from the frames' bytes"
    );
}
