// The map a replay was played on, from its zip (BeatSaver's: Info.dat, one .dat per
// difficulty, the song, and for map format v4 an audio data file): which map it is (its
// hash), and the difficulty played as objects at their song times in seconds, with where the
// game puts them. Formats v2, v3 and v4; notes, bombs, walls, arcs, chains; BPM changes, v4
// NJS events, 90/360-degree lane rotations; the notes' jump. Every rule's source is in
// web/README.md ("Maps and music").
import { readZip } from "./zip.js";
import { laneX, rowY } from "./place.js";

// Inflated size of Info.dat or one difficulty file at most (the song may be larger).
const DAT_MAX = 32 << 20;

export class MapError extends Error {}

const lower = (s) => String(s ?? "").toLowerCase();
const num = (v, d = 0) => (typeof v === "number" && Number.isFinite(v) ? v : d);
const arr = (v) => (Array.isArray(v) ? v : []);

// The game's note jump speed for a difficulty whose map gives 0.
export function defaultNjs(difficulty) {
  switch (lower(difficulty)) {
    case "expert": return 12;
    case "expertplus": return 16;
    default: return 10;
  }
}

// The game's half jump duration in beats: 4 beats, halved while the half jump distance
// (NJS · beat · beats) is over 18 m, plus the map's offset, at least 0.25.
export function halfJumpBeats(bpm, njs, offset) {
  const beat = 60 / bpm;
  let h = 4;
  while (njs * beat * h > 17.999) h /= 2;
  h += offset;
  return h < 0.25 ? 0.25 : h;
}

// Beats to song seconds: the BPM at beat 0 and changes [{beat, bpm}] (v2, v3), or v4's
// audio data regions [{si, ei, sb, eb}] at `freq` samples a second.
export class Timing {
  constructor(bpm, changes = [], regions = null, freq = 0) {
    this.regions = null;
    if (regions && regions.length && freq > 0) {
      this.regions = regions
        .filter((r) => r.eb > r.sb && r.ei > r.si)
        .sort((a, b) => a.sb - b.sb)
        .map((r) => ({ b0: r.sb, b1: r.eb, s0: r.si / freq, s1: r.ei / freq }));
      if (!this.regions.length) this.regions = null;
    }
    const good = changes.filter((c) => c.bpm > 0 && c.beat >= 0).sort((a, b) => a.beat - b.beat);
    this.segs = [{ beat: 0, bpm, t: 0 }];
    for (const c of good) {
      const last = this.segs[this.segs.length - 1];
      const t = last.t + ((c.beat - last.beat) * 60) / last.bpm;
      if (c.beat === last.beat) last.bpm = c.bpm;
      else this.segs.push({ beat: c.beat, bpm: c.bpm, t });
    }
  }

  // The BPM at beat 0.
  get startBpm() {
    if (this.regions) {
      const r = this.regions[0];
      return ((r.b1 - r.b0) * 60) / (r.s1 - r.s0);
    }
    return this.segs[0].bpm;
  }

  seconds(b) {
    if (this.regions) {
      const rs = this.regions;
      let k = 0;
      while (k + 1 < rs.length && rs[k + 1].b0 <= b) k++;
      const r = rs[k];
      return r.s0 + ((b - r.b0) * (r.s1 - r.s0)) / (r.b1 - r.b0);
    }
    let k = 0;
    while (k + 1 < this.segs.length && this.segs[k + 1].beat <= b) k++;
    const s = this.segs[k];
    return s.t + ((b - s.beat) * 60) / s.bpm;
  }
}

const V2_ROTATIONS = [-60, -45, -30, -15, 15, 30, 45, 60];

// A v2, v3 or v4 difficulty's objects, in beats and the map's grid: notes (c 0 red, 1 blue),
// bombs, walls (x, y, w, h in lanes and layers, d beats), arcs and chains.
export function parseDifficulty(d) {
  const out = { notes: [], bombs: [], walls: [], arcs: [], chains: [], bpmChanges: [], njsEvents: [], rotations: [] };
  const version = String(d.version ?? d._version ?? "2");
  if (version.startsWith("4")) {
    const cn = arr(d.colorNotesData);
    const bn = arr(d.bombNotesData);
    const ob = arr(d.obstaclesData);
    const ad = arr(d.arcsData);
    const cd = arr(d.chainsData);
    const note = (i) => cn[i] ?? {};
    for (const n of arr(d.colorNotes)) {
      const m = note(n.i);
      out.notes.push({ b: num(n.b), x: num(m.x), y: num(m.y), c: num(m.c), d: num(m.d), r: num(n.r) });
    }
    for (const n of arr(d.bombNotes)) {
      const m = bn[n.i] ?? {};
      out.bombs.push({ b: num(n.b), x: num(m.x), y: num(m.y), r: num(n.r) });
    }
    for (const o of arr(d.obstacles)) {
      const m = ob[o.i] ?? {};
      out.walls.push({ b: num(o.b), d: num(m.d), x: num(m.x), y: num(m.y), w: num(m.w, 1), h: num(m.h, 5), r: num(o.r) });
    }
    // Lane rotations: each object's own (`r`, `hr` for an arc's or chain's head), and the
    // deprecated spawn rotations (t 0 early, 1 late; r degrees).
    const sr = arr(d.spawnRotationsData);
    for (const e of arr(d.spawnRotations)) {
      const m = sr[e.i] ?? {};
      out.rotations.push({ b: num(e.b), e: num(m.t), r: num(m.r) });
    }
    for (const a of arr(d.arcs)) {
      const h = note(a.hi);
      const t = note(a.ti);
      const m = ad[a.ai] ?? {};
      out.arcs.push({ b: num(a.hb), tb: num(a.tb), c: num(h.c), x: num(h.x), y: num(h.y), d: num(h.d, 8),
        tx: num(t.x), ty: num(t.y), td: num(t.d, 8), mu: num(m.m, 1), tmu: num(m.tm, 1), m: num(m.a), r: num(a.hr) });
    }
    // NJS events: the NJS relative to the map's (d), reached at their beat with their
    // easing (e) from the previous event; p 1 keeps the previous one's.
    const nd = arr(d.njsEventData);
    for (const e of arr(d.njsEvents)) {
      const m = nd[e.i] ?? {};
      out.njsEvents.push({ b: num(e.b), d: num(m.d), e: num(m.e), p: num(m.p) });
    }
    for (const c of arr(d.chains)) {
      const h = note(c.i);
      const m = cd[c.ci] ?? {};
      out.chains.push({ b: num(c.hb), tb: num(c.tb), c: num(h.c), x: num(h.x), y: num(h.y), d: num(h.d),
        tx: num(m.tx), ty: num(m.ty), sc: num(m.c, 2), s: num(m.s, 1), r: num(c.hr) });
    }
    return out;
  }
  if (version.startsWith("3")) {
    for (const n of arr(d.colorNotes)) out.notes.push({ b: num(n.b), x: num(n.x), y: num(n.y), c: num(n.c), d: num(n.d) });
    for (const n of arr(d.bombNotes)) out.bombs.push({ b: num(n.b), x: num(n.x), y: num(n.y) });
    for (const o of arr(d.obstacles)) {
      out.walls.push({ b: num(o.b), d: num(o.d), x: num(o.x), y: num(o.y), w: num(o.w, 1), h: num(o.h, 5) });
    }
    for (const a of arr(d.sliders)) {
      out.arcs.push({ b: num(a.b), tb: num(a.tb), c: num(a.c), x: num(a.x), y: num(a.y), d: num(a.d, 8),
        tx: num(a.tx), ty: num(a.ty), td: num(a.tc, 8), mu: num(a.mu, 1), tmu: num(a.tmu, 1), m: num(a.m) });
    }
    for (const c of arr(d.burstSliders)) {
      out.chains.push({ b: num(c.b), tb: num(c.tb), c: num(c.c), x: num(c.x), y: num(c.y), d: num(c.d),
        tx: num(c.tx), ty: num(c.ty), sc: num(c.sc, 2), s: num(c.s, 1) });
    }
    for (const e of arr(d.bpmEvents)) out.bpmChanges.push({ beat: num(e.b), bpm: num(e.m) });
    for (const e of arr(d.rotationEvents)) out.rotations.push({ b: num(e.b), e: num(e.e), r: num(e.r) });
    return out;
  }
  // v2: type 0 red, 1 blue, 3 bomb; walls of type 0 (full height) and 1 (crouch).
  for (const n of arr(d._notes)) {
    const b = num(n._time);
    if (n._type === 3) out.bombs.push({ b, x: num(n._lineIndex), y: num(n._lineLayer) });
    else if (n._type === 0 || n._type === 1) {
      out.notes.push({ b, x: num(n._lineIndex), y: num(n._lineLayer), c: n._type, d: num(n._cutDirection) });
    }
  }
  for (const o of arr(d._obstacles)) {
    const crouch = o._type === 1;
    out.walls.push({ b: num(o._time), d: num(o._duration), x: num(o._lineIndex), y: crouch ? 2 : 0,
      w: num(o._width, 1), h: crouch ? 3 : 5 });
  }
  // v2.6 arcs (`_sliders`).
  for (const a of arr(d._sliders)) {
    out.arcs.push({ b: num(a._headTime), tb: num(a._tailTime), c: num(a._colorType), x: num(a._headLineIndex),
      y: num(a._headLineLayer), d: num(a._headCutDirection, 8), tx: num(a._tailLineIndex), ty: num(a._tailLineLayer),
      td: num(a._tailCutDirection, 8), mu: num(a._headControlPointLengthMultiplier, 1),
      tmu: num(a._tailControlPointLengthMultiplier, 1), m: num(a._sliderMidAnchorMode) });
  }
  for (const e of arr(d._events)) {
    if (e._type === 100) out.bpmChanges.push({ beat: num(e._time), bpm: num(e._floatValue) });
    // Rotations: type 14 early, 15 late; values 0..7 are −60, −45, −30, −15, 15, 30, 45, 60°.
    const r = V2_ROTATIONS[e._value];
    if ((e._type === 14 || e._type === 15) && r !== undefined) out.rotations.push({ b: num(e._time), e: e._type - 14, r });
  }
  for (const e of arr(d._customData?._BPMChanges ?? d._BPMChanges)) {
    out.bpmChanges.push({ beat: num(e._time), bpm: num(e._BPM ?? e._bpm) });
  }
  return out;
}

// Info.dat's difficulties in the order it lists them, its BPM and song (v2 and v4).
export function parseInfo(j) {
  const diffs = [];
  if (Array.isArray(j.difficultyBeatmaps)) {
    for (const d of j.difficultyBeatmaps) {
      diffs.push({ mode: d.characteristic, difficulty: d.difficulty, file: d.beatmapDataFilename,
        njs: num(d.noteJumpMovementSpeed), offset: num(d.noteJumpStartBeatOffset) });
    }
    const a = j.audio ?? {};
    return { version: 4, bpm: num(a.bpm, 120), song: a.songFilename, audioData: a.audioDataFilename, diffs };
  }
  for (const set of arr(j._difficultyBeatmapSets)) {
    for (const d of arr(set._difficultyBeatmaps)) {
      diffs.push({ mode: set._beatmapCharacteristicName, difficulty: d._difficulty, file: d._beatmapFilename,
        njs: num(d._noteJumpMovementSpeed), offset: num(d._noteJumpStartBeatOffset) });
    }
  }
  return { version: 2, bpm: num(j._beatsPerMinute, 120), song: j._songFilename, audioData: null, diffs,
    songTimeOffset: num(j._songTimeOffset) };
}

const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
const json = (bytes, what) => {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (e) {
    throw new MapError(`${what}: not JSON (${e.message})`);
  }
};

// A map zip (ArrayBuffer) for a replay's info: {hash, matched, difficulty, objects, song
// bytes, ...}. Throws MapError (or ZipError) for a zip that is not a readable map.
export async function loadMap(bytes, info) {
  const zip = readZip(bytes);
  const infoEntry = zip.find("Info.dat");
  if (!infoEntry) throw new MapError("the zip has no Info.dat");
  if (infoEntry.size > DAT_MAX) throw new MapError("Info.dat is too large");
  const infoBytes = await zip.read(infoEntry.name);
  const mapInfo = parseInfo(json(infoBytes, "Info.dat"));
  // The hash: SHA-1 of Info.dat and then each difficulty's file, in Info.dat's order.
  const parts = [infoBytes];
  const files = new Map();
  for (const d of mapInfo.diffs) {
    const e = zip.find(d.file);
    if (!e) throw new MapError(`the zip has no ${d.file} (named in Info.dat)`);
    if (e.size > DAT_MAX) throw new MapError(`${d.file} is too large`);
    if (!files.has(e.name)) files.set(e.name, await zip.read(e.name));
    parts.push(files.get(e.name));
  }
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  const hash = hex(await crypto.subtle.digest("SHA-1", all));
  const want = lower(info?.hash).slice(0, 40);
  const matched = want.length === 40 && want === hash;
  // The difficulty played: its mode and name, else the first of that name.
  const diff = mapInfo.diffs.find((d) => lower(d.mode) === lower(info?.mode) && lower(d.difficulty) === lower(info?.difficulty)) ??
    mapInfo.diffs.find((d) => lower(d.difficulty) === lower(info?.difficulty));
  if (!diff) throw new MapError(`the map has no ${info?.difficulty} ${info?.mode}`);
  const data = parseDifficulty(json(files.get(zip.find(diff.file).name), diff.file));
  let regions = null;
  let freq = 0;
  if (mapInfo.version === 4 && mapInfo.audioData && zip.find(mapInfo.audioData)) {
    const a = json(await zip.read(zip.find(mapInfo.audioData).name), mapInfo.audioData);
    freq = num(a.songFrequency);
    regions = arr(a.bpmData).map((r) => ({ si: num(r.si), ei: num(r.ei), sb: num(r.sb), eb: num(r.eb) }));
  }
  const timing = new Timing(mapInfo.bpm, data.bpmChanges, regions, freq);
  const songEntry = mapInfo.song ? zip.find(mapInfo.song) : null;
  return {
    hash, matched, mode: diff.mode, difficulty: diff.difficulty,
    ...build(data, timing, diff, info),
    song: songEntry ? () => zip.read(songEntry.name) : null,
    songName: mapInfo.song ?? null,
  };
}

// A map zip's bytes from `url` (a same-origin URL: the page's CSP allows no other), at most
// the zip limit; null when the server has none (404).
export async function fetchMap(url, most = 64 << 20) {
  const res = await fetch(url);
  if (res.status === 404) return null;
  if (!res.ok) throw new MapError(`the map's zip: HTTP ${res.status}`);
  const len = Number(res.headers.get("content-length"));
  if (len > most) throw new MapError(`the map's zip is over ${most >> 20} MiB`);
  const reader = res.body.getReader();
  const chunks = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > most) {
      reader.cancel().catch(() => {});
      throw new MapError(`the map's zip is over ${most >> 20} MiB`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

// The grid's positions, in the game's coordinates (x right, y up, metres): lanes and rows as
// place.js has them (the notes' rows before the player's jump offset); walls by layer from the
// floor, 0.6 m a lane and a layer.
export const LAYER = 0.6;
export const wallX = (x) => laneX(x) - 0.3;

// The difficulty's objects at their song times, with the jump: {objects, walls, arcs, njs,
// halfJump (s), jumpDistance (m), counts}.
function build(data, timing, diff, info) {
  const njs = diff.njs > 0 ? diff.njs : defaultNjs(diff.difficulty);
  const bpm = timing.startBpm;
  const ruleHalf = halfJumpBeats(bpm, njs, diff.offset) * (60 / bpm);
  const jd = info && info.jumpDistance > 1 && info.jumpDistance < 100 ? info.jumpDistance : null;
  const halfJump = jd ? jd / (2 * njs) : ruleHalf;
  const sec = (b) => timing.seconds(b);
  // Lane rotations (degrees, clockwise seen from above), for the 90/360-degree
  // characteristics only: an object's own (v4) plus the sum of the rotation events before
  // its beat, and of the early ones at its beat.
  const turning = /^(90|360)degree$/i.test(String(diff.mode));
  const events = data.rotations;
  const rot = (o) => {
    if (!turning) return 0;
    let r = o.r ?? 0;
    for (const e of events) if (e.b < o.b - 1e-4 || (e.e === 0 && e.b <= o.b + 1e-4)) r += e.r;
    return r;
  };
  // Notes, bombs and chain links: what the player cuts or dodges, sorted by time.
  const objects = [];
  for (const n of data.notes) {
    objects.push({ kind: "note", t: sec(n.b), line: n.x, layer: n.y, color: n.c, dir: n.d, rot: rot(n), event: null });
  }
  for (const n of data.bombs) {
    objects.push({ kind: "bomb", t: sec(n.b), line: n.x, layer: n.y, color: -1, dir: 8, rot: rot(n), event: null });
  }
  for (const c of data.chains) {
    const links = Math.max(2, Math.min(64, Math.round(c.sc)));
    const t0 = sec(c.b);
    const t1 = sec(c.tb);
    // The head is a colour note of the map; links 1..sc-1 follow it evenly in time, and in
    // place along a quadratic curve (ArcViewer's ChainManager.CreateChainLinks): from the
    // head to the tail, its middle point half the head-to-tail distance from the head in
    // the head's cut direction, link i at i/(sc-1) of the way times the squish factor.
    const hx = laneX(c.x);
    const hy = rowY(c.y);
    const tx = laneX(c.tx);
    const ty = rowY(c.ty);
    const [dx, dy] = dirVector(c.d);
    const half = Math.hypot(tx - hx, ty - hy) / 2;
    const midX = hx + dx * half;
    const midY = hy + dy * half;
    for (let i = 1; i < links; i++) {
      const f = i / (links - 1);
      const u = f * c.s;
      const a = (1 - u) * (1 - u);
      const b = 2 * (1 - u) * u;
      const w = u * u;
      objects.push({ kind: "link", t: t0 + (t1 - t0) * f, line: c.x + (c.tx - c.x) * f,
        layer: c.y + (c.ty - c.y) * f, mx: a * hx + b * midX + w * tx, my: a * hy + b * midY + w * ty,
        color: c.c, dir: c.d, rot: rot(c), event: null });
    }
  }
  objects.sort((a, b) => a.t - b.t);
  // Where each jumps from (y0, m, before the player's jump offset): a note or bomb from the
  // line under its row, one line (0.6 m) up from 0.25 m for each other row under it taken at
  // the same time in its lane (ArcViewer's NoteManager.GetStartY); a chain link from 0.25 m.
  const at = new Map(); // time (ms) and lane -> rows taken by notes and bombs
  const key = (o) => `${Math.round(o.t * 1000)}/${o.line}`;
  for (const o of objects) {
    if (o.kind === "link") continue;
    const k = key(o);
    if (!at.has(k)) at.set(k, new Set());
    at.get(k).add(o.layer);
  }
  for (const o of objects) {
    let under = 0;
    if (o.kind !== "link" && o.layer > 0) for (const l of at.get(key(o))) if (l < o.layer) under++;
    o.y0 = JUMP_FLOOR + under * LAYER;
  }
  // Crossed pairs: a red and a blue note alone at one time, the red in a lane right of the
  // blue's, neither an arc's end nor a chain's head: each jumps in from the other's lane and
  // swaps over it, the higher (the red on a tie) 0.45 m above, the other 0.15 m below
  // (the game's note flip, as ArcViewer's NoteManager.GetFlipYHeights has it).
  const ends = new Set();
  const end = (b, x, y) => ends.add(`${Math.round(sec(b) * 1000)}/${x}/${y}`);
  for (const a of data.arcs) {
    end(a.b, a.x, a.y);
    end(a.tb, a.tx, a.ty);
  }
  for (const c of data.chains) end(c.b, c.x, c.y);
  const byTime = new Map();
  for (const o of objects) {
    if (o.kind !== "note") continue;
    const k = `${Math.round(o.t * 1000)}`;
    if (!byTime.has(k)) byTime.set(k, []);
    byTime.get(k).push(o);
  }
  for (const [k, pair] of byTime) {
    if (pair.length !== 2 || pair.some((o) => ends.has(`${k}/${o.line}/${o.layer}`))) continue;
    const red = pair.find((o) => o.color === 0);
    const blue = pair.find((o) => o.color === 1);
    if (!red || !blue || !(red.line > blue.line)) continue;
    red.flipX = laneX(blue.line);
    blue.flipX = laneX(red.line);
    const redOver = !(red.layer < blue.layer);
    red.flipY = redOver ? FLIP_OVER : FLIP_UNDER;
    blue.flipY = redOver ? FLIP_UNDER : FLIP_OVER;
  }
  const walls = data.walls.map((w) => {
    const t = sec(w.b);
    const width = Math.abs(w.w) * LAYER;
    const x0 = w.w < 0 ? wallX(w.x) - width : wallX(w.x);
    return { t, t1: sec(w.b + Math.max(0, w.d)), x0, x1: x0 + width, y0: w.y * LAYER,
      y1: (w.y + Math.max(0, w.h)) * LAYER, rot: rot(w), hit: false };
  }).sort((a, b) => a.t - b.t);
  // Arcs: an end on a note or bomb (same time, lane and row) starts half a note (0.225 m)
  // along its direction; the mid-anchor mode counts when the head's and tail's directions lie
  // on one line and the lane is the same (ArcViewer's ObjectManager and Arc).
  // (An end on a note or bomb follows its jump: the line it jumps from, y0.)
  const taken = new Map(objects.filter((o) => o.kind !== "link").map((o) => [`${key(o)}/${o.layer}`, o.y0]));
  const arcs = data.arcs.map((a) => {
    const t0 = sec(a.b);
    const t1 = sec(a.tb);
    const ha = ANGLES[a.d] ?? 0;
    const ta = ANGLES[a.td] ?? 0;
    const plane = Math.abs(ha - ta) % 180 === 0;
    return { t: t0, t1, color: a.c, line: a.x, layer: a.y, dir: a.d, tline: a.tx, tlayer: a.ty, tdir: a.td,
      mu: a.mu, tmu: a.tmu, mid: plane && a.x === a.tx ? Math.max(0, Math.min(2, Math.round(a.m ?? 0))) : 0,
      headOn: taken.has(`${Math.round(t0 * 1000)}/${a.x}/${a.y}`), tailOn: taken.has(`${Math.round(t1 * 1000)}/${a.tx}/${a.ty}`),
      headY0: taken.get(`${Math.round(t0 * 1000)}/${a.x}/${a.y}`) ?? null,
      tailY0: taken.get(`${Math.round(t1 * 1000)}/${a.tx}/${a.ty}`) ?? null, rot: rot(a) };
  }).sort((a, b) => a.t - b.t);
  const njsEvents = data.njsEvents.map((e) => ({ t: sec(e.b), d: e.d, e: e.e, p: e.p > 0 })).sort((a, b) => a.t - b.t);
  return {
    objects, walls, arcs, njs, halfJump, halfJumpRule: ruleHalf, njsEvents, jumpCache: { t: NaN, njs, half: halfJump }, jumpDistance: 2 * halfJump * njs, startBpm: bpm,
    jdFrom: jd ? "replay" : "rule",
    counts: { notes: data.notes.length, bombs: data.bombs.length, walls: data.walls.length, arcs: data.arcs.length,
      chains: data.chains.length },
  };
}

// Each replay note event (sorted by time) matched to its map object: same kind (a bomb for
// a bomb event), its time within 5 ms, and of those the one at its lane, row and colour
// (the note ID's parts), else the nearest in time. Sets object.event and event.mapped.
export function matchEvents(map, events) {
  const objs = map.objects;
  let lo = 0;
  let matched = 0;
  for (const e of events) {
    if (e.mapped) continue;
    const t = e.spawn;
    while (lo < objs.length && objs[lo].t < t - 0.005) lo++;
    let best = null;
    let bestScore = Infinity;
    for (let i = lo; i < objs.length && objs[i].t <= t + 0.005; i++) {
      const o = objs[i];
      if (o.event) continue;
      if ((e.outcome === 4) !== (o.kind === "bomb")) continue;
      const score = Math.abs(o.t - t) * 1000 + (Math.round(o.line) === e.line ? 0 : 10) +
        (Math.round(o.layer) === e.layer ? 0 : 10) + (o.kind === "bomb" || o.color === e.color ? 0 : 10);
      if (score < bestScore) {
        bestScore = score;
        best = o;
      }
    }
    if (best) {
      best.event = e;
      e.mapped = true;
      matched++;
    }
  }
  return matched;
}

// Where an object is at song time t (game coordinates, into out: x, y, z): its lane and
// row (the rows shifted by the player's jump offset) and z = (its time − t) · NJS.
// The easings of the game's events (ArcViewer's BeatSaberEasings): -1 none (a step at the
// end), 0 linear, 1 in, 2 out, 3 in-out quadratic; others are taken as linear.
export function ease(f, e) {
  if (e === -1) return f >= 1 ? 1 : 0;
  if (e === 1) return f * f;
  if (e === 2) return 1 - (1 - f) * (1 - f);
  if (e === 3) return f < 0.5 ? 2 * f * f : 1 - ((2 - 2 * f) * (2 - 2 * f)) / 2;
  return f;
}

// The NJS and half-jump duration at song time t ({njs, half}, cached for the last t): the
// map's, or with v4 NJS events its NJS plus the offset in force, eased from the previous
// event's offset (0 before the first, from time 0) towards the next's, held by an event
// with p and before one; a slower NJS keeps the jump distance (half jump × base/NJS),
// a faster one the half-jump duration (ArcViewer's JumpManager, read as reference).
export function jumpAt(map, t) {
  const c = map.jumpCache;
  if (c.t === t) return c;
  const ev = map.njsEvents;
  let offset = 0;
  if (ev.length) {
    let k = -1;
    while (k + 1 < ev.length && ev[k + 1].t <= t) k++;
    let from = 0;
    if (k >= 0) {
      from = ev[k].t;
      offset = ev[k].d;
      if (ev[k].p) {
        offset = 0;
        for (let i = k - 1; i >= 0; i--) {
          if (!ev[i].p) {
            offset = ev[i].d;
            break;
          }
        }
      }
    }
    const next = ev[k + 1];
    if (next && !next.p) {
      const span = next.t - from;
      offset += (next.d - offset) * ease(span > 0 ? (t - from) / span : 1, next.e);
    }
  }
  c.t = t;
  c.njs = Math.max(map.njs + offset, 0.01);
  c.half = map.halfJump / Math.min(c.njs / map.njs, 1);
  return c;
}

export function objectAt(map, o, t, shift, out) {
  // A chain link's place is its own (`mx`, `my`: on the chain's curve); its line and layer
  // only say which replay event it matches. The jump's height: a parabola in time from where
  // it jumps (y0) at half the jump duration before its time, highest (its row) at its time,
  // falling back as it flies on: y = row − (row − y0) · ((its time − t) / half jump)²
  // (the game's NoteJump, as ArcViewer's ObjectManager.SpawnParabola has it).
  const j = jumpAt(map, t);
  const row = (o.my ?? rowAt(o.layer)) + shift;
  const u = Math.min(1, Math.abs(o.t - t) / j.half);
  out[0] = o.mx ?? laneX(o.line);
  out[1] = row - (row - (o.y0 ?? row)) * u * u;
  out[2] = (o.t - t) * j.njs;
  if (o.flipY) {
    // A crossed note's swap, in the first quarter of its jump (p: the jump's fraction gone):
    // x from the other's lane, eased in-out, and a hop of flipY · (1 − cos 8πp)/2.
    const p = (t - (o.t - j.half)) / (2 * j.half);
    if (p <= 0) out[0] = o.flipX;
    else if (p < 0.25) {
      out[0] = o.flipX + (out[0] - o.flipX) * ease(4 * p, 3);
      out[1] += o.flipY * (0.5 - Math.cos(8 * Math.PI * p) / 2);
    }
  }
  return o.rot ? turn(out, o.rot) : out;
}

// A point (x, y, z; in its lane's frame) turned with its lane, `deg` degrees clockwise seen
// from above about the vertical axis through the player's place: x' = x cos + z sin,
// z' = z cos − x sin.
export function turn(p, deg) {
  const a = (deg * Math.PI) / 180;
  const c = Math.cos(a);
  const s = Math.sin(a);
  const x = p[0];
  p[0] = x * c + p[2] * s;
  p[2] = p[2] * c - x * s;
  return p;
}

// Where a note jumps from, the base line (m), and an arc's pulls (m): an arc's curve leaves
// its head (and reaches its tail) along their cut directions, its control point 2.5 m times
// the multiplier from the end (ArcViewer's Arc and ChroMapper's ArcContainer: the game's 2.5).
export const JUMP_FLOOR = 0.25;
const FLIP_OVER = 0.45;
const FLIP_UNDER = -0.15;
export const ARC_CONTROL = 2.5;
export const ARC_ATTACH = 0.225;
const ANGLES = [180, 0, -90, 90, -135, 135, -45, 45, 0]; // cut direction -> degrees (0 down)
const dirOfAngle = (deg) => [Math.sin((deg * Math.PI) / 180), -Math.cos((deg * Math.PI) / 180)];

// An arc's curve between its ends `head` and `tail` ([x, y, z], m; the attachment offsets
// applied by the caller) as cubic Bézier segments [[p0, p1, p2, p3], ...]: one, its control
// points the ends pulled along their directions in x and y (each at its end's z); or with a
// mid anchor (1 clockwise, 2 counter-clockwise) two, meeting at a middle point 2.5 m from
// the ends' midpoint at right angles to the head's direction, its control points mirrored
// about it (ArcViewer's ArcManager.GetArcPointsWithMidRotation).
export function arcSegments(a, head, tail) {
  const [hx, hy] = dirVector(a.dir);
  const [tx, ty] = dirVector(a.tdir);
  const p0 = head;
  const p1 = [head[0] + hx * a.mu * ARC_CONTROL, head[1] + hy * a.mu * ARC_CONTROL, head[2]];
  const p2 = [tail[0] - tx * a.tmu * ARC_CONTROL, tail[1] - ty * a.tmu * ARC_CONTROL, tail[2]];
  const p3 = tail;
  if (!a.mid) return [[p0, p1, p2, p3]];
  const [ox, oy] = a.dir === 8 ? [0, 0] : dirOfAngle((ANGLES[a.dir] ?? 0) + (a.mid === 1 ? -90 : 90));
  const m = [(p0[0] + p3[0]) / 2 + ox * ARC_CONTROL, (p0[1] + p3[1]) / 2 + oy * ARC_CONTROL, (p0[2] + p3[2]) / 2];
  const d = (k) => Math.abs(p1[k] - m[k]) + Math.abs(p2[k] - m[k]);
  let cx = Math.abs(p1[0] - p2[0]) < 1e-5 ? 0 : d(0) * 0.25;
  let cy = Math.abs(p1[1] - p2[1]) < 1e-5 ? 0 : d(1) * 0.25;
  const cz = d(2) * 0.15;
  if (p1[0] < p2[0]) cx = -cx;
  if (p1[1] < p2[1]) cy = -cy;
  return [[p0, p1, [m[0] + cx, m[1] + cy, m[2] - cz], m], [m, [m[0] - cx, m[1] - cy, m[2] + cz], p2, p3]];
}

// How far an arc's bead is moved up or down by its ends' jump (m): an end on a note is where
// that note is in its jump, offset by (note's height − its row) (0 for a free end, or for
// an end out of its jump's first half-jump window); a bead at depth dz past the head (of
// the arc's length L) takes the head's offset times (1 − min(1, dz/R))² and the tail's times
// (1 − min(1, (L − dz)/R))², mixed in proportion dz/L (R: the half jump distance; ArcViewer's
// ArcManager.GetArcSpawnAnimationOffset).
export function arcJumpY(headOff, tailOff, dz, L, R) {
  const c = (v) => Math.max(0, Math.min(1, v));
  const h = headOff * (1 - c(dz / R)) ** 2;
  const t = tailOff * (1 - c((L - dz) / R)) ** 2;
  return h + (t - h) * (L > 0 ? c(dz / L) : 0);
}

// A point of a cubic Bézier segment at parameter u, into out.
export function bezierAt(s, u, out) {
  const g = 1 - u;
  const w0 = g * g * g;
  const w1 = 3 * g * g * u;
  const w2 = 3 * g * u * u;
  const w3 = u * u * u;
  for (let k = 0; k < 3; k++) out[k] = w0 * s[0][k] + w1 * s[1][k] + w2 * s[2][k] + w3 * s[3][k];
  return out;
}

// A row's height for a fractional layer (chain links between rows).
export function rowAt(layer) {
  const l = Math.floor(layer);
  const f = layer - l;
  return f === 0 ? rowY(l) : rowY(l) + (rowY(l + 1) - rowY(l)) * f;
}

// A unit vector (x, y) in the grid for a cut direction (0 up, 1 down, 2 left, 3 right, 4 up
// left, 5 up right, 6 down left, 7 down right; 8 any: none).
export function dirVector(d) {
  const s = Math.SQRT1_2;
  return [[0, 1], [0, -1], [-1, 0], [1, 0], [-s, s], [s, s], [-s, -s], [s, -s]][d] ?? [0, 0];
}
