//! Property tests: write → read → write is the identity for any replay the model can hold,
//! and the push parser fed in random pieces yields exactly what the whole input yields.

use bsor_stream_core::bsor::{
    self, BsorString, ControllerOffsets, CutInfo, Event, Frame, Height, Info, NoteEvent, NoteId,
    NoteOutcome, Pause, Pose, PushParser, Quat, RawBool, Replay, ReplayBuilder, UnknownEventType,
    Vec3, Wall,
};
use proptest::collection::vec;
use proptest::prelude::*;

/// Any 32-bit pattern: NaN payloads, infinities, subnormals and negative zero included.
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => any::<u32>().prop_map(f32::from_bits),
        1 => prop::sample::select(vec![0.0f32, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0]),
    ]
}

fn vec3() -> impl Strategy<Value = Vec3> {
    (any_f32(), any_f32(), any_f32()).prop_map(|(x, y, z)| Vec3 { x, y, z })
}

fn pose() -> impl Strategy<Value = Pose> {
    (vec3(), any_f32(), any_f32(), any_f32(), any_f32()).prop_map(|(position, x, y, z, w)| Pose {
        position,
        rotation: Quat { x, y, z, w },
    })
}

fn frame() -> impl Strategy<Value = Frame> {
    (any_f32(), any::<i32>(), pose(), pose(), pose()).prop_map(
        |(time, fps, head, left_hand, right_hand)| Frame {
            time,
            fps,
            head,
            left_hand,
            right_hand,
        },
    )
}

fn cut() -> impl Strategy<Value = CutInfo> {
    (
        any::<[u8; 4]>(),
        (any_f32(), vec3(), any::<i32>(), any_f32(), any_f32()),
        (vec3(), vec3(), any_f32(), any_f32(), any_f32(), any_f32()),
    )
        .prop_map(
            |(b, (speed, dir, saber, td, cdd), (cp, cn, dist, angle, bef, aft))| CutInfo {
                speed_ok: RawBool(b[0]),
                direction_ok: RawBool(b[1]),
                saber_type_ok: RawBool(b[2]),
                was_cut_too_soon: RawBool(b[3]),
                saber_speed: speed,
                saber_dir: dir,
                saber_type: saber,
                time_deviation: td,
                cut_dir_deviation: cdd,
                cut_point: cp,
                cut_normal: cn,
                cut_distance_to_center: dist,
                cut_angle: angle,
                before_cut_rating: bef,
                after_cut_rating: aft,
            },
        )
}

fn note() -> impl Strategy<Value = NoteEvent> {
    let outcome = prop_oneof![
        cut().prop_map(NoteOutcome::Good),
        cut().prop_map(NoteOutcome::Bad),
        Just(NoteOutcome::Miss),
        Just(NoteOutcome::Bomb),
        any::<i32>()
            .prop_filter_map("defined type", UnknownEventType::new)
            .prop_map(NoteOutcome::Unknown),
    ];
    (any::<i32>(), any_f32(), any_f32(), outcome).prop_map(
        |(note_id, event_time, spawn_time, outcome)| NoteEvent {
            note_id,
            event_time,
            spawn_time,
            outcome,
        },
    )
}

/// Well-formed strings (length field = byte count), any Unicode.
fn string() -> impl Strategy<Value = BsorString> {
    ".{0,24}".prop_map(|s: String| BsorString::new(&s))
}

fn info() -> impl Strategy<Value = Info> {
    (
        vec(string(), 16),
        any::<i32>(),
        any::<u8>(),
        vec(any_f32(), 5),
    )
        .prop_map(|(s, score, left_handed, f)| {
            let mut s = s.into_iter();
            let mut next = || s.next().unwrap_or_default();
            Info {
                version: next(),
                game_version: next(),
                timestamp: next(),
                player_id: next(),
                player_name: next(),
                platform: next(),
                tracking_system: next(),
                hmd: next(),
                controller: next(),
                hash: next(),
                song_name: next(),
                mapper: next(),
                difficulty: next(),
                score,
                mode: next(),
                environment: next(),
                modifiers: next(),
                jump_distance: f[0],
                left_handed: RawBool(left_handed),
                height: f[1],
                start_time: f[2],
                fail_time: f[3],
                speed: f[4],
            }
        })
}

prop_compose! {
    fn replay()(
        info in info(),
        frames in vec(frame(), 0..12),
        notes in vec(note(), 0..12),
        walls in vec((any::<i32>(), any_f32(), any_f32(), any_f32()), 0..4),
        heights in vec((any_f32(), any_f32()), 0..4),
        pauses in vec((any::<i64>(), any_f32()), 0..3),
        offsets in prop::option::of((pose(), pose())),
        user_data in prop::option::of(vec(any::<u8>(), 0..40)),
        trailing in vec(any::<u8>(), 0..8),
    ) -> Replay {
        // A trailing byte that reads as an optional section's marker is that section, so
        // the first trailing byte may not be one the position still accepts.
        let mut trailing = trailing;
        let lowest_marker_taken = if user_data.is_some() { 8 } else if offsets.is_some() { 7 } else { 6 };
        if let Some(first) = trailing.first_mut() {
            if (lowest_marker_taken..=7).contains(first) {
                *first = 0xee;
            }
        }
        Replay {
            info,
            frames,
            notes,
            walls: walls.into_iter().map(|(wall_id, energy, time, spawn_time)| Wall { wall_id, energy, time, spawn_time }).collect(),
            heights: heights.into_iter().map(|(height, time)| Height { height, time }).collect(),
            pauses: pauses.into_iter().map(|(duration, time)| Pause { duration, time }).collect(),
            controller_offsets: offsets.map(|(left, right)| ControllerOffsets { left, right }),
            user_data,
            trailing,
        }
    }
}

/// An event as bytes, so that comparisons are bit-exact (NaN payloads included).
fn event_bytes(ev: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    match ev {
        Event::Info(i) => {
            out.push(0);
            bsor::encode_info(i, &mut out);
        }
        Event::SectionStart { section, count } => {
            out.push(1);
            out.extend_from_slice(section.name().as_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        Event::Frame(f) => out.extend_from_slice(&bsor::encode_frame(f)),
        Event::Note(n) => bsor::encode_note(n, &mut out),
        Event::Wall(w) => out.extend_from_slice(&bsor::encode_wall(w)),
        Event::Height(h) => out.extend_from_slice(&bsor::encode_height(h)),
        Event::Pause(p) => out.extend_from_slice(&bsor::encode_pause(p)),
        Event::ControllerOffsets(o) => out.extend_from_slice(&bsor::encode_controller_offsets(o)),
        Event::UserData(d) => {
            out.push(7);
            out.extend_from_slice(d);
        }
        Event::Trailing(t) => {
            out.push(8);
            out.extend_from_slice(t);
        }
        Event::End => out.push(9),
    }
    out
}

/// All events of `bytes`, fed in pieces whose sizes cycle through `pieces`.
fn push_events(bytes: &[u8], pieces: &[usize]) -> Result<Vec<Vec<u8>>, bsor::ParseError> {
    let mut p = PushParser::new();
    let mut events = Vec::new();
    let mut rest = bytes;
    let mut sizes = pieces.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        p.push(&rest[..n]);
        rest = &rest[n..];
        while let Some(ev) = p.next_event()? {
            events.push(event_bytes(&ev));
        }
    }
    p.finish();
    while let Some(ev) = p.next_event()? {
        events.push(event_bytes(&ev));
    }
    Ok(events)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn write_read_write_is_the_identity(r in replay()) {
        let bytes = bsor::to_vec(&r).unwrap();
        let back = bsor::parse(&bytes).unwrap();
        prop_assert!(bsor::to_vec(&back).unwrap() == bytes);
        prop_assert_eq!(back.frames.len(), r.frames.len());
        prop_assert_eq!(back.notes.len(), r.notes.len());
        prop_assert_eq!(&back.trailing, &r.trailing);
        prop_assert_eq!(&back.user_data, &r.user_data);
    }

    #[test]
    fn push_parser_in_random_pieces_yields_what_the_whole_input_yields(
        r in replay(),
        pieces in vec(1usize..200, 1..16),
    ) {
        let bytes = bsor::to_vec(&r).unwrap();
        let whole = push_events(&bytes, &[bytes.len().max(1)]).unwrap();
        let pieced = push_events(&bytes, &pieces).unwrap();
        prop_assert_eq!(&whole, &pieced);
        // And the events rebuild the replay that the whole-buffer parser reads.
        let mut p = PushParser::new();
        p.push(&bytes);
        p.finish();
        let mut b = ReplayBuilder::default();
        while let Some(ev) = p.next_event().unwrap() {
            b.apply(ev);
        }
        let from_events = bsor::to_vec(&b.finish().unwrap()).unwrap();
        let from_parse = bsor::to_vec(&bsor::parse(&bytes).unwrap()).unwrap();
        prop_assert!(from_events == from_parse);
    }

    #[test]
    fn damaged_input_gives_the_same_result_from_both_parsers(
        r in replay(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        pieces in vec(1usize..64, 1..8),
    ) {
        let mut bytes = bsor::to_vec(&r).unwrap();
        for (i, b) in edits {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep);
        let whole = bsor::parse(&bytes);
        let pushed = push_events(&bytes, &pieces);
        match (&whole, &pushed) {
            (Ok(replay), Ok(_)) => prop_assert!(bsor::to_vec(replay).unwrap() == bytes),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            _ => prop_assert!(false, "parsers disagree: {:?} vs {:?}", whole.err(), pushed.err()),
        }
    }

    #[test]
    fn legacy_utf16_lengths_are_recovered(
        name in "[a-zA-Z0-9 äöüéñßøåЖж漢字カナ🎵🥴]{1,20}",
        song in "[a-zA-Z0-9 äöüéñßøåЖж漢字カナ🎵🥴]{1,30}",
    ) {
        let legacy = |s: &str| BsorString {
            bytes: s.as_bytes().to_vec(),
            length_field: s.encode_utf16().count() as i32,
        };
        let mut r = Replay::default();
        r.info.player_name = legacy(&name);
        r.info.platform = "steam".into();
        r.info.song_name = legacy(&song);
        r.info.mapper = "mapper".into();
        let bytes = bsor::to_vec(&r).unwrap();
        let back = bsor::parse(&bytes).unwrap();
        prop_assert_eq!(back.info.player_name.as_str(), Some(name.as_str()));
        prop_assert_eq!(back.info.platform.as_str(), Some("steam"));
        prop_assert_eq!(back.info.song_name.as_str(), Some(song.as_str()));
        prop_assert_eq!(back.info.mapper.as_str(), Some("mapper"));
        prop_assert!(bsor::to_vec(&back).unwrap() == bytes);
    }

    #[test]
    fn note_id_split_and_join_are_inverse(
        scoring in 0i32..8, line in 0i32..10, layer in 0i32..10, color in -1i32..9, dir in 0i32..10,
    ) {
        let id = scoring * 10000 + line * 1000 + layer * 100 + color * 10 + dir;
        let parts = NoteId::split(id);
        prop_assert_eq!(
            (parts.scoring_type, parts.line_index, parts.note_line_layer, parts.color_type, parts.cut_direction),
            (scoring, line, layer, color, dir)
        );
        prop_assert_eq!(parts.join(), id);
    }
}
