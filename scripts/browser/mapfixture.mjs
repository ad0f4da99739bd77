// Map zips and replays made to match them, for the player's map tests (test.mjs) and the
// benchmark: a BeatSaver-style zip (Info.dat, a difficulty file, the song as real Ogg Vorbis
// holding a click track, and for v4 its audio data file) in map format v2 (2.6, with arcs),
// v3 or v4, with a BPM change, notes (a crossed pair among them), bombs, walls, arcs, in v3
// and v4 chains, in v4 NJS events, lane rotations (for its 90Degree Expert); and a BSOR
// whose note events are the map's notes (cut, one missed, one bad cut, a bomb hit) at their
// times.
// Everything here is computed from the formats' documentation (web/README.md, "Maps and
// music"), not from the page's code.
import { createHash } from "node:crypto";
import { deflateRawSync, crc32 } from "node:zlib";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// ---- the map ----
export const BPM = 120;
export const CHANGE_BEAT = 12; // the BPM changes here ...
export const BPM2 = 180; // ... to this
export const SONG_SECONDS = 12;
export const CLICK_EVERY = 0.5; // s of song time between the song's clicks

// Song seconds of beat b (the BPM change at CHANGE_BEAT).
export function seconds(b) {
  return b <= CHANGE_BEAT ? (b * 60) / BPM : (CHANGE_BEAT * 60) / BPM + ((b - CHANGE_BEAT) * 60) / BPM2;
}

// The objects, in beats and the grid (x lane 0..3, y layer 0..2; c 0 red, 1 blue; d cut
// direction). fate: what the replay does to it.
export const NOTES = [
  { b: 2.5, x: 2, y: 0, c: 0, d: 1, fate: "cut" }, // a crossed pair: the red right of the blue
  { b: 2.5, x: 1, y: 1, c: 1, d: 1, fate: "cut" },
  { b: 4, x: 1, y: 0, c: 0, d: 1, fate: "cut" },
  { b: 5, x: 2, y: 0, c: 1, d: 1, fate: "cut" },
  { b: 6, x: 0, y: 1, c: 0, d: 2, fate: "cut" },
  { b: 7, x: 3, y: 1, c: 1, d: 3, fate: "cut" },
  { b: 8, x: 1, y: 2, c: 0, d: 0, fate: "cut" },
  { b: 9, x: 2, y: 2, c: 1, d: 0, fate: "miss" },
  { b: 10, x: 1, y: 0, c: 0, d: 1, fate: "cut" }, // an arc's head
  { b: 11, x: 2, y: 1, c: 1, d: 8, fate: "bad" },
  { b: 13, x: 0, y: 0, c: 0, d: 6, fate: "cut" },
  { b: 14, x: 1, y: 0, c: 0, d: 1, fate: "cut" }, // a chain's head
  { b: 16, x: 3, y: 0, c: 1, d: 7, fate: "cut" },
  { b: 18, x: 2, y: 1, c: 1, d: 1, fate: "cut" },
  { b: 19, x: 2, y: 2, c: 1, d: 1, fate: "cut" }, // an arc's tail
  { b: 20, x: 1, y: 1, c: 0, d: 1, fate: "cut" },
];
export const BOMBS = [
  { b: 6.5, x: 2, y: 0, fate: "dodged" },
  { b: 9.5, x: 1, y: 1, fate: "dodged" },
  { b: 15, x: 2, y: 2, fate: "hit" },
  { b: 18, x: 2, y: 0, fate: "dodged" }, // under a note: that note jumps from a line higher
];
// Walls: v2 has full-height (y 0, h 5) and crouch (y 2, h 3) walls only.
export const WALLS = [
  { b: 3, d: 2, x: 0, y: 0, w: 1, h: 5 },
  { b: 8, d: 1, x: 3, y: 2, w: 1, h: 3 },
  { b: 16.5, d: 1.5, x: 0, y: 0, w: 2, h: 5 },
];
// Arcs (m: the mid-anchor mode, 1 clockwise, 2 counter-clockwise; it counts only for an arc
// in one lane whose ends' directions lie on one line: the first's does, the second's not).
export const ARCS = [
  { b: 10, tb: 11, c: 0, x: 1, y: 0, d: 1, tx: 1, ty: 2, td: 0, mu: 1, tmu: 1, m: 2 },
  { b: 17, tb: 19, c: 1, x: 3, y: 0, d: 5, tx: 2, ty: 2, td: 1, mu: 1.5, tmu: 0.5, m: 1 },
];
export const CHAINS = [{ b: 14, tb: 14.5, c: 0, x: 1, y: 0, d: 1, tx: 1, ty: 2, sc: 4, s: 0.8 }];

// v4's NJS events: the NJS relative to the map's (d) reached at beat b with easing e (-1
// none, 0 linear, 3 in-out quadratic) from the previous event; p 1 holds the previous one's.
export const NJS_EVENTS = [
  { b: 12, d: 0, e: 0, p: 0 },
  { b: 15, d: -4, e: 3, p: 0 },
  { b: 17, d: 0, e: 0, p: 1 },
  { b: 19, d: 3, e: 0, p: 0 },
];

export const NJS = 14;

// Lane rotations (degrees, clockwise seen from above; e 0 early: objects at its beat turn
// too, 1 late: only those after it), played in the 90Degree characteristic (the same
// difficulty file as Standard's, where the game does not turn); v2 writes them as events 14
// and 15 with values 0..7 for −60, −45, −30, −15, 15, 30, 45, 60.
export const ROTATIONS = [
  { b: 7, e: 0, r: 15 },
  { b: 13, e: 1, r: -30 },
  { b: 16, e: 0, r: 45 },
];
// An object's lane rotation at beat b: the rotations before b, and the early ones at b.
export const rotationAt = (b) => ROTATIONS.filter((e) => e.b < b || (e.e === 0 && e.b === b)).reduce((n, e) => n + e.r, 0);
export const OFFSET = 0;

// Chain links (the head excluded), in metres: evenly in time; in place on the quadratic
// curve from the head to the tail whose middle point is half their distance from the head
// in the head's cut direction (ArcViewer's ChainManager), link i at (i / (sc - 1)) * squish.
// Lanes 0.6 m apart centred on 1.5, rows at 0.85, 1.40, 1.90 m (the player's jump offset not
// included); direction 1 is down, 0 up.
export function chainLinks(c) {
  const lane = (x) => (x - 1.5) * 0.6;
  const row = (y) => [0.85, 1.4, 1.9][y];
  const dir = { 0: [0, 1], 1: [0, -1], 2: [-1, 0], 3: [1, 0] }[c.d];
  const [h, tl] = [[lane(c.x), row(c.y)], [lane(c.tx), row(c.ty)]];
  const half = Math.hypot(tl[0] - h[0], tl[1] - h[1]) / 2;
  const mid = [h[0] + dir[0] * half, h[1] + dir[1] * half];
  const out = [];
  for (let i = 1; i < c.sc; i++) {
    const f = i / (c.sc - 1);
    const u = f * c.s;
    const at = (k) => (1 - u) ** 2 * h[k] + 2 * (1 - u) * u * mid[k] + u ** 2 * tl[k];
    out.push({ t: seconds(c.b) + (seconds(c.tb) - seconds(c.b)) * f, mx: at(0), my: at(1),
      x: c.x + (c.tx - c.x) * f, y: c.y + (c.ty - c.y) * f, c: c.c, d: c.d });
  }
  return out;
}

function difficultyV2() {
  const notes = NOTES.map((n) => ({ _time: n.b, _lineIndex: n.x, _lineLayer: n.y, _type: n.c, _cutDirection: n.d }))
    .concat(BOMBS.map((n) => ({ _time: n.b, _lineIndex: n.x, _lineLayer: n.y, _type: 3, _cutDirection: 0 })))
    .sort((a, b) => a._time - b._time);
  return {
    _version: "2.6.0",
    _notes: notes,
    _sliders: ARCS.map((a) => ({ _colorType: a.c, _headTime: a.b, _headLineIndex: a.x, _headLineLayer: a.y,
      _headCutDirection: a.d, _headControlPointLengthMultiplier: a.mu, _tailTime: a.tb, _tailLineIndex: a.tx,
      _tailLineLayer: a.ty, _tailCutDirection: a.td, _tailControlPointLengthMultiplier: a.tmu,
      _sliderMidAnchorMode: a.m })),
    _obstacles: WALLS.map((w) => ({ _time: w.b, _lineIndex: w.x, _type: w.y === 2 ? 1 : 0, _duration: w.d, _width: w.w })),
    _events: [{ _time: CHANGE_BEAT, _type: 100, _value: 0, _floatValue: BPM2 },
      ...ROTATIONS.map((e) => ({ _time: e.b, _type: 14 + e.e, _value: [-60, -45, -30, -15, 15, 30, 45, 60].indexOf(e.r) }))]
      .sort((a, b) => a._time - b._time),
  };
}

function difficultyV3() {
  return {
    version: "3.3.0",
    bpmEvents: [{ b: CHANGE_BEAT, m: BPM2 }],
    colorNotes: NOTES.map((n) => ({ b: n.b, x: n.x, y: n.y, c: n.c, d: n.d, a: 0 })),
    bombNotes: BOMBS.map((n) => ({ b: n.b, x: n.x, y: n.y })),
    obstacles: WALLS.map((w) => ({ b: w.b, d: w.d, x: w.x, y: w.y, w: w.w, h: w.h })),
    sliders: ARCS.map((a) => ({ b: a.b, c: a.c, x: a.x, y: a.y, d: a.d, mu: a.mu, tb: a.tb, tx: a.tx, ty: a.ty,
      tc: a.td, tmu: a.tmu, m: a.m })),
    burstSliders: CHAINS.map((c) => ({ b: c.b, c: c.c, x: c.x, y: c.y, d: c.d, tb: c.tb, tx: c.tx, ty: c.ty,
      sc: c.sc, s: c.s })),
    basicBeatmapEvents: [],
    rotationEvents: ROTATIONS.map((e) => ({ b: e.b, e: e.e, r: e.r })),
  };
}

function difficultyV4() {
  const colorNotesData = [];
  const index = (n) => {
    const key = JSON.stringify(n);
    let i = colorNotesData.findIndex((m) => JSON.stringify(m) === key);
    if (i < 0) i = colorNotesData.push(n) - 1;
    return i;
  };
  // v4: each object's own lane rotation (`r`; `hr` and `tr` for arcs' and chains' ends).
  const r = rotationAt;
  const colorNotes = NOTES.map((n) => ({ b: n.b, r: r(n.b), i: index({ x: n.x, y: n.y, c: n.c, d: n.d, a: 0 }) }));
  const arcsData = [];
  const arcs = ARCS.map((a) => {
    arcsData.push({ m: a.mu, tm: a.tmu, a: a.m });
    return { hb: a.b, tb: a.tb, hr: r(a.b), tr: r(a.tb), hi: index({ x: a.x, y: a.y, c: a.c, d: a.d, a: 0 }),
      ti: index({ x: a.tx, y: a.ty, c: a.c, d: a.td, a: 0 }), ai: arcsData.length - 1 };
  });
  const chainsData = [];
  const chains = CHAINS.map((c) => {
    chainsData.push({ tx: c.tx, ty: c.ty, c: c.sc, s: c.s });
    return { hb: c.b, tb: c.tb, hr: r(c.b), tr: r(c.tb), i: index({ x: c.x, y: c.y, c: c.c, d: c.d, a: 0 }), ci: chainsData.length - 1 };
  });
  return {
    version: "4.0.0",
    colorNotes, colorNotesData,
    bombNotes: BOMBS.map((n, i) => ({ b: n.b, r: r(n.b), i })),
    bombNotesData: BOMBS.map((n) => ({ x: n.x, y: n.y })),
    obstacles: WALLS.map((w, i) => ({ b: w.b, r: r(w.b), i })),
    obstaclesData: WALLS.map((w) => ({ d: w.d, x: w.x, y: w.y, w: w.w, h: w.h })),
    arcs, arcsData, chains, chainsData, spawnRotations: [], spawnRotationsData: [],
    njsEvents: NJS_EVENTS.map((e, i) => ({ b: e.b, i })), njsEventData: NJS_EVENTS.map((e) => ({ p: e.p, e: e.e, d: e.d })),
  };
}

const FREQ = 44100;
function audioDataV4() {
  const split = seconds(CHANGE_BEAT) * FREQ;
  const end = SONG_SECONDS * FREQ;
  return {
    version: "4.0.0", songChecksum: "", songSampleCount: end, songFrequency: FREQ,
    bpmData: [
      { si: 0, ei: split, sb: 0, eb: CHANGE_BEAT },
      { si: split, ei: end, sb: CHANGE_BEAT, eb: CHANGE_BEAT + ((end - split) / FREQ) * (BPM2 / 60) },
    ],
    lufsData: [],
  };
}

function infoV2(diffFile, title) {
  return {
    _version: "2.1.0", _songName: title, _songSubName: "", _songAuthorName: "bsor-stream",
    _levelAuthorName: "tests", _beatsPerMinute: BPM, _songTimeOffset: 0, _shuffle: 0, _shufflePeriod: 0.5,
    _previewStartTime: 0, _previewDuration: 5, _songFilename: "song.egg", _coverImageFilename: "",
    _environmentName: "DefaultEnvironment", _allDirectionsEnvironmentName: "GlassDesertEnvironment",
    _difficultyBeatmapSets: [{
      _beatmapCharacteristicName: "Standard",
      _difficultyBeatmaps: [
        { _difficulty: "Hard", _difficultyRank: 5, _beatmapFilename: "Hard.dat", _noteJumpMovementSpeed: 10,
          _noteJumpStartBeatOffset: 0 },
        { _difficulty: "Expert", _difficultyRank: 7, _beatmapFilename: diffFile, _noteJumpMovementSpeed: NJS,
          _noteJumpStartBeatOffset: OFFSET },
      ],
    }, {
      _beatmapCharacteristicName: "90Degree",
      _difficultyBeatmaps: [
        { _difficulty: "Expert", _difficultyRank: 7, _beatmapFilename: diffFile, _noteJumpMovementSpeed: NJS,
          _noteJumpStartBeatOffset: OFFSET },
      ],
    }],
  };
}

function infoV4(diffFile, title) {
  return {
    version: "4.0.0",
    song: { title, subTitle: "", author: "bsor-stream" },
    audio: { songFilename: "song.egg", songDuration: SONG_SECONDS, audioDataFilename: "AudioData.dat", bpm: BPM,
      lufs: 0, previewStartTime: 0, previewDuration: 5 },
    songPreviewFilename: "song.egg", coverImageFilename: "",
    environmentNames: ["DefaultEnvironment"], colorSchemes: [],
    difficultyBeatmaps: [
      { characteristic: "Standard", difficulty: "Hard", beatmapAuthors: { mappers: [], lighters: [] },
        environmentNameIdx: 0, beatmapColorSchemeIdx: 0, noteJumpMovementSpeed: 10, noteJumpStartBeatOffset: 0,
        lightshowDataFilename: "Lightshow.dat", beatmapDataFilename: "Hard.dat" },
      { characteristic: "Standard", difficulty: "Expert", beatmapAuthors: { mappers: [], lighters: [] },
        environmentNameIdx: 0, beatmapColorSchemeIdx: 0, noteJumpMovementSpeed: NJS, noteJumpStartBeatOffset: OFFSET,
        lightshowDataFilename: "Lightshow.dat", beatmapDataFilename: diffFile },
      { characteristic: "90Degree", difficulty: "Expert", beatmapAuthors: { mappers: [], lighters: [] },
        environmentNameIdx: 0, beatmapColorSchemeIdx: 0, noteJumpMovementSpeed: NJS, noteJumpStartBeatOffset: OFFSET,
        lightshowDataFilename: "Lightshow.dat", beatmapDataFilename: diffFile },
    ],
  };
}

// A click track (Ogg Vorbis, from oggenc): a 3 ms burst every CLICK_EVERY s of the song (or
// at the song times `times`), silence between; mono, 44.1 kHz.
export function clickTrack(dir, length = SONG_SECONDS, name = "click", times = null) {
  const n = Math.round(length * FREQ);
  const pcm = Buffer.alloc(44 + n * 2);
  pcm.write("RIFF", 0);
  pcm.writeUInt32LE(36 + n * 2, 4);
  pcm.write("WAVEfmt ", 8);
  pcm.writeUInt32LE(16, 16);
  pcm.writeUInt16LE(1, 20);
  pcm.writeUInt16LE(1, 22);
  pcm.writeUInt32LE(FREQ, 24);
  pcm.writeUInt32LE(FREQ * 2, 28);
  pcm.writeUInt16LE(2, 32);
  pcm.writeUInt16LE(16, 34);
  pcm.write("data", 36);
  pcm.writeUInt32LE(n * 2, 40);
  const clicks = times ?? Array.from({ length: Math.ceil(length / CLICK_EVERY) }, (_, k) => k * CLICK_EVERY);
  for (const c of clicks) {
    const at = Math.round(c * FREQ);
    for (let i = 0; i < 0.003 * FREQ && at + i < n; i++) {
      const v = Math.sin((2 * Math.PI * 2000 * i) / FREQ) * 0.9;
      pcm.writeInt16LE(Math.round(v * 32767), 44 + (at + i) * 2);
    }
  }
  const wav = join(dir, `${name}.wav`);
  const ogg = join(dir, `${name}.ogg`);
  writeFileSync(wav, pcm);
  execFileSync("oggenc", ["-Q", "-q", "6", "-o", ogg, wav]);
  return readFileSync(ogg);
}

// A zip of [name, bytes, size] (deflated; stored when that is no smaller); `size`, when
// given, is the inflated size the zip claims (a lie, for the bounds' test).
export function zip(files) {
  const locals = [];
  const central = [];
  let offset = 0;
  for (const [name, data, claimed] of files) {
    const raw = Buffer.from(data);
    const deflated = deflateRawSync(raw);
    const stored = deflated.length >= raw.length;
    const body = stored ? raw : deflated;
    const nameB = Buffer.from(name);
    const crc = crc32(raw);
    const head = Buffer.alloc(30);
    head.writeUInt32LE(0x04034b50, 0);
    head.writeUInt16LE(20, 4);
    head.writeUInt16LE(stored ? 0 : 8, 8);
    head.writeUInt32LE(crc, 14);
    head.writeUInt32LE(body.length, 18);
    head.writeUInt32LE(claimed ?? raw.length, 22);
    head.writeUInt16LE(nameB.length, 26);
    locals.push(head, nameB, body);
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt16LE(20, 4);
    c.writeUInt16LE(20, 6);
    c.writeUInt16LE(stored ? 0 : 8, 10);
    c.writeUInt32LE(crc, 16);
    c.writeUInt32LE(body.length, 20);
    c.writeUInt32LE(claimed ?? raw.length, 24);
    c.writeUInt16LE(nameB.length, 28);
    c.writeUInt32LE(offset, 42);
    central.push(c, nameB);
    offset += 30 + nameB.length + body.length;
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

// A map zip in format `version` (2, 3 or 4) with the song `ogg`: {bytes, hash}. The hash is
// BeatSaver's: SHA-1 of Info.dat, then each difficulty file in the order Info.dat lists them.
export function mapZip(version, ogg, { lie = false, title = "Click Track" } = {}) {
  const diffFile = "Expert.dat";
  const diff = version === 2 ? difficultyV2() : version === 3 ? difficultyV3() : difficultyV4();
  const hard = version === 2 ? { _version: "2.2.0", _notes: [], _obstacles: [], _events: [] }
    : version === 3 ? { version: "3.3.0", colorNotes: [] } : { version: "4.0.0", colorNotes: [] };
  const info = version === 4 ? infoV4(diffFile, title) : infoV2(diffFile, title);
  const infoB = Buffer.from(JSON.stringify(info, null, 2));
  const diffB = Buffer.from(JSON.stringify(diff));
  const hardB = Buffer.from(JSON.stringify(hard));
  // (Info.dat lists Hard, Expert and 90Degree's Expert, the last two one file.)
  const hash = createHash("sha1").update(infoB).update(hardB).update(diffB).update(diffB).digest("hex");
  // (`lie`: the difficulty's entry claims a tenth of its size: it inflates past it.)
  const files = [["Info.dat", infoB], ["Hard.dat", hardB], [diffFile, diffB, lie ? diffB.length >> 3 : undefined],
    ["song.egg", ogg]];
  if (version === 4) {
    files.push(["AudioData.dat", Buffer.from(JSON.stringify(audioDataV4()))]);
    files.push(["Lightshow.dat", Buffer.from(JSON.stringify({ version: "4.0.0" }))]);
  }
  return { bytes: zip(files), hash };
}

// ---- the replay (BSOR, BS-Open-Replay's layout) ----
class Writer {
  constructor() {
    this.parts = [];
  }
  i32(v) { const b = Buffer.alloc(4); b.writeInt32LE(v); this.parts.push(b); }
  i64(v) { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v)); this.parts.push(b); }
  f32(v) { const b = Buffer.alloc(4); b.writeFloatLE(v); this.parts.push(b); }
  u8(v) { this.parts.push(Buffer.from([v])); }
  str(s) { const b = Buffer.from(String(s)); this.i32(b.length); this.parts.push(b); }
  bytes() { return Buffer.concat(this.parts); }
}

// The note events the replay holds, in time order: {id, t (event), spawn, type (0 good,
// 1 bad, 2 miss, 3 bomb), x, y, c}.
export function replayEvents() {
  const ev = [];
  const id = (scoring, x, y, c, d) => scoring * 10000 + x * 1000 + y * 100 + c * 10 + d;
  const chainHeads = new Set(CHAINS.map((c) => `${c.b}/${c.x}/${c.y}`));
  const arcHeads = new Set(ARCS.map((a) => `${a.b}/${a.x}/${a.y}`));
  for (const n of NOTES) {
    const key = `${n.b}/${n.x}/${n.y}`;
    // Stored scoring types (the game's + 2): 3 normal, 4 arc head, 6 chain head.
    const scoring = chainHeads.has(key) ? 6 : arcHeads.has(key) ? 4 : 3;
    const spawn = seconds(n.b);
    const type = n.fate === "miss" ? 2 : n.fate === "bad" ? 1 : 0;
    ev.push({ id: id(scoring, n.x, n.y, n.c, n.d), t: type === 2 ? spawn + 0.2 : spawn - 0.03, spawn, type,
      x: n.x, y: n.y, c: n.c });
  }
  for (const c of CHAINS) {
    for (const l of chainLinks(c)) {
      ev.push({ id: id(7, Math.round(l.x), Math.round(l.y), l.c, 8), t: l.t - 0.02, spawn: l.t, type: 0,
        x: Math.round(l.x), y: Math.round(l.y), c: l.c });
    }
  }
  for (const n of BOMBS) {
    if (n.fate !== "hit") continue;
    const spawn = seconds(n.b);
    ev.push({ id: id(2, n.x, n.y, -1, 9), t: spawn - 0.01, spawn, type: 3, x: n.x, y: n.y, c: -1 });
  }
  return ev.sort((a, b) => a.t - b.t);
}

// A BSOR of SONG_SECONDS at 90 fps for the map `hash` (Expert, `mode` Standard or 90Degree),
// height 1.7 m; its info's jump distance `jd` (0: none given) and modifiers.
export function replay(hash, { jd = 0, modifiers = "", seconds: length = SONG_SECONDS, mode = "Standard" } = {}) {
  const w = new Writer();
  w.i32(0x442d3d69);
  w.u8(1);
  w.u8(0);
  for (const s of ["0.9.9", "1.37.0", "1700000000", "76561190000000001", "Map Tester", "steam", "OpenVR",
    "Test HMD", "Test Controller", hash, "Click Track", "tests", "Expert"]) w.str(s);
  w.i32(0);
  for (const s of [mode, "DefaultEnvironment", modifiers]) w.str(s);
  w.f32(jd);
  w.u8(0);
  w.f32(1.7);
  w.f32(0);
  w.f32(0);
  w.f32(0);
  // Frames.
  w.u8(1);
  const frames = Math.floor(length * 90);
  w.i32(frames);
  for (let i = 0; i < frames; i++) {
    const t = i / 90;
    w.f32(t);
    w.i32(90);
    for (const p of [[0, 1.7, 0], [-0.3 + 0.1 * Math.sin(t * 3), 1.1, 0.3], [0.3 + 0.1 * Math.cos(t * 3), 1.1, 0.3]]) {
      w.f32(p[0]); w.f32(p[1]); w.f32(p[2]);
      w.f32(0); w.f32(0); w.f32(0); w.f32(1);
    }
  }
  // Notes.
  const ev = replayEvents();
  w.u8(2);
  w.i32(ev.length);
  for (const e of ev) {
    w.i32(e.id);
    w.f32(e.t);
    w.f32(e.spawn);
    w.i32(e.type);
    if (e.type === 0 || e.type === 1) {
      const good = e.type === 0;
      w.u8(1); w.u8(good ? 1 : 0); w.u8(good ? 1 : 0); w.u8(0);
      w.f32(5);
      w.f32(0); w.f32(-1); w.f32(0);
      w.i32(Math.max(0, e.c));
      w.f32(0); w.f32(0);
      w.f32((e.x - 1.5) * 0.6); w.f32(1); w.f32(0.8);
      w.f32(1); w.f32(0); w.f32(0);
      w.f32(0.05); w.f32(90);
      w.f32(1); w.f32(1);
    }
  }
  // No wall, height or pause events.
  w.u8(3); w.i32(0);
  w.u8(4); w.i32(0);
  w.u8(5); w.i32(0);
  return w.bytes();
}

// A v3 map (BPM 60: a beat a second) made from a real replay's note events (`bsor-stream
// export`'s JSON): a colour note or bomb at each event's note time, its lane, row, colour
// and direction from the note ID; the song a click track as long as the replay. {bytes, hash}.
export function mapFromReplay(exported, dir) {
  const colorNotes = [];
  const bombNotes = [];
  for (const n of exported.notes) {
    const id = n.noteID;
    const d = ((id % 10) + 10) % 10;
    let rest = (id - d) / 10;
    const c = (((rest + 1) % 10) + 10) % 10 - 1;
    rest = (rest - c) / 10;
    const y = ((rest % 10) + 10) % 10;
    rest = (rest - y) / 10;
    const x = ((rest % 10) + 10) % 10;
    if (n.eventType === 3 || c < 0) bombNotes.push({ b: n.spawnTime, x, y });
    else colorNotes.push({ b: n.spawnTime, x, y, c, d: d > 8 ? 8 : d, a: 0 });
  }
  const last = exported.frames.length ? exported.frames[exported.frames.length - 1].time : 60;
  const ogg = clickTrack(dir, Math.ceil(last) + 1, "long-click");
  const diff = Buffer.from(JSON.stringify({ version: "3.3.0", bpmEvents: [], colorNotes, bombNotes, obstacles: [],
    sliders: [], burstSliders: [] }));
  const info = Buffer.from(JSON.stringify({
    _version: "2.1.0", _songName: exported.info.songName, _beatsPerMinute: 60, _songTimeOffset: 0, _songFilename: "song.egg",
    _difficultyBeatmapSets: [{ _beatmapCharacteristicName: exported.info.mode, _difficultyBeatmaps: [
      { _difficulty: exported.info.difficulty, _beatmapFilename: "Map.dat", _noteJumpMovementSpeed: 18, _noteJumpStartBeatOffset: 0 },
    ] }],
  }));
  const hash = createHash("sha1").update(info).update(diff).digest("hex");
  return { bytes: zip([["Info.dat", info], ["Map.dat", diff], ["song.egg", ogg]]), hash };
}
