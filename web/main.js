// The player page: sources (live, stored, ?src=, a dropped file) go to the decoder worker;
// what it decodes is kept here and shown at the playhead's song time. Text from a replay
// is only ever set with textContent.
import { Scene, View } from "./scene.js";
import { Score } from "./score.js";
import { Pacer } from "./pace.js";
import { NjsFit, laneX, rowY, jumpOffset, heightAt } from "./place.js";
import { loadMap, fetchMap, matchEvents, objectAt, jumpAt, rowAt, dirVector, arcSegments, arcJumpY, bezierAt, turn, ARC_ATTACH, LAYER } from "./map.js";
import { Music, songSpeed } from "./audio.js";

// The decoder's record layouts, from the module (the worker says them before any record).
let FRAME_FLOATS = 0;
let EVENT_FLOATS = 0;
const LIVE_DELAY = 0.25; // s behind the newest frame a live view plays
const MAX_FRAMES = 2_000_000; // about 6 hours at 90 fps: the page keeps no more

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

const status = {
  ready: false, mode: "list", framesDecoded: 0, songTime: 0, score: 0, combo: 0, misses: 0,
  bytesFetched: 0, ended: false, lastError: null, firstFrameTime: null, framesRendered: 0,
  drawRate: "full", rateChanges: 0, samples: null, glError: null, reads: 0, eventsTo: null, afterSeek: null, backlog: null, gaps: {},
  map: null, mapState: "none", mapFirstFrame: null, audio: null,
};
window.bsorStatus = status;

// ---- what has been decoded ----
// Frames in segments of consecutive frames, sorted by time: one growing segment for a live
// session or a whole file; one per keyframe group for a stored stream read by ranges.
let segs = [];
let totalFrames = 0;
let groups = null; // a stored stream read by ranges: [{t0, t1, state}] from its index
let notes = [];
let walls = [];
let heights = [];
let pauses = [];
let info = null;
let streamEnded = false;
// A stored stream read by ranges: the song time before which every event is in (the page
// shows no frame at or after it: the HUD must be right from the first frame shown).
let eventsTo = Infinity;
let cutShort = false; // a stored stream without its index, read whole
// Live: the song time up to which every event is in. The project's encoder sends a chunk's
// events right after its frames (src/stream/encoder.rs), so once frames past a chunk come,
// the events up to that chunk's last frame came before them; a live view shows no later
// frame (its HUD right at every frame, a late joiner's first included). The live delay
// (0.25 s) is longer than a live chunk (0.1 s): only a join waits for it.
let liveEventsTo = -Infinity;
// Live, joined late: the events before the join point, from the relay's HTTP: null (joined
// at the start), "loading", "done" or "failed". No frame is shown while they load (for at
// most BACKLOG_WAIT ms), so the HUD is right from the first frame.
let backlog = null;
let backlogSince = 0;
const BACKLOG_WAIT = 3000;
let endedDetail = "";
const score = new Score();
const fit = new NjsFit(); // the note jump speed, from the cuts
// The map (map.js) once loaded and matched to the replay's hash; null before, or without one.
let map = null;
let mapTried = false;
const music = new Music();

function resetData() {
  segs = [];
  totalFrames = 0;
  groups = null;
  notes = [];
  walls = [];
  heights = [];
  pauses = [];
  info = null;
  streamEnded = false;
  eventsTo = Infinity;
  liveEventsTo = -Infinity;
  cutShort = false;
  backlog = null;
  endedDetail = "";
  score.reset();
  fit.reset();
  map = null;
  mapTried = false;
  music.unload();
  status.map = null;
  status.mapState = "none";
  status.mapFirstFrame = null;
  status.framesDecoded = 0;
  status.ended = false;
  status.backlog = null;
  status.gaps = {};
}

function segment(data, n) {
  return { data, n, group: -1 };
}

// Appends to the last segment, or (group >= 0) makes the group's own segment.
function addFrames(f, group = -1) {
  const n = f.length / FRAME_FLOATS;
  if (totalFrames + n > MAX_FRAMES) {
    fail(`this replay has more than ${MAX_FRAMES} frames: the page shows the first ones`);
    return;
  }
  totalFrames += n;
  status.framesDecoded += n;
  if (group >= 0) {
    const seg = segment(f, n);
    seg.group = group;
    segs.push(seg);
    segs.sort((a, b) => a.data[0] - b.data[0]);
    return;
  }
  let seg = segs[segs.length - 1];
  if (!seg) {
    seg = segment(new Float32Array(FRAME_FLOATS * 4096), 0);
    segs.push(seg);
  }
  if ((seg.n + n) * FRAME_FLOATS > seg.data.length) {
    let size = seg.data.length;
    while (size < (seg.n + n) * FRAME_FLOATS) size *= 2;
    const bigger = new Float32Array(size);
    bigger.set(seg.data.subarray(0, seg.n * FRAME_FLOATS));
    seg.data = bigger;
  }
  seg.data.set(f, seg.n * FRAME_FLOATS);
  seg.n += n;
}

// Events arrive in time order (a chunk's events, and chunk after chunk): the lists are only
// sorted again when a batch starts before their end.
function addEvents(e) {
  let earliest = Infinity;
  const before = [notes.length, walls.length, heights.length, pauses.length];
  const ends = [notes, walls, heights, pauses].map((l) => (l.length ? l[l.length - 1].t : -Infinity));
  for (let i = 0; i < e.length; i += EVENT_FLOATS) {
    const r = e.subarray(i, i + EVENT_FLOATS);
    const t = r[1];
    if (t < earliest) earliest = t;
    switch (r[0]) {
      case 0:
        notes.push({ t, spawn: r[2], line: r[3], layer: r[4], color: r[5], dir: r[6], scoring: r[7],
          outcome: r[8], points: r[9], most: r[10], saber: r[11], shown: false,
          cut: r[8] === 1 || r[8] === 2 ? [r[12], r[13], r[14], r[15], r[16], r[17]] : null });
        if (r[8] === 1 || r[8] === 2) fit.add(r[2], t, r[14]);
        break;
      case 1:
        walls.push({ t, spawn: r[2], line: r[3], type: r[4], width: r[5], energy: r[6] });
        break;
      case 2:
        heights.push({ t, height: r[2] });
        break;
      case 3:
        pauses.push({ t, duration: r[2] });
        break;
      default:
        break;
    }
  }
  const byTime = (a, b) => a.t - b.t;
  [notes, walls, heights, pauses].forEach((l, k) => {
    let sorted = true;
    for (let i = before[k]; i < l.length && sorted; i++) sorted = l[i].t >= (i > 0 ? l[i - 1].t : ends[k]);
    if (!sorted) l.sort(byTime);
  });
  score.setEvents(notes, walls, earliest);
  if (map && map.matched) status.map.eventsMatched += matchEvents(map, notes);
}

const segTime = (seg, i) => seg.data[i * FRAME_FLOATS];
const segEnd = (seg) => segTime(seg, seg.n - 1);

// The segment and frame shown at song time t: the last frame at or before t (the first
// one before the start); null when that part of a stored stream is not loaded.
const found = { seg: null, i: 0 }; // frameAt's answer, reused
function frameAt(t) {
  let k = segs.length - 1;
  while (k > 0 && segTime(segs[k], 0) > t) k--;
  const seg = segs[k];
  if (!seg || seg.n === 0) return null;
  if (groups && (t > segEnd(seg) + 0.5 || t < segTime(seg, 0) - 0.5)) return null;
  let lo = 0;
  let hi = seg.n - 1;
  found.seg = seg;
  found.i = 0;
  if (t < segTime(seg, 0)) return found;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (segTime(seg, mid) <= t) lo = mid;
    else hi = mid - 1;
  }
  found.i = lo;
  return found;
}

function firstTime() {
  if (groups) return groups[0].t0;
  return segs.length && segs[0].n ? segTime(segs[0], 0) : 0;
}

function liveEdge() {
  const seg = segs[segs.length - 1];
  // (The index gives each group's keyframe chunk's last frame; the group's own last frame
  // is known once the group is in.)
  if (groups) return Math.max(groups[groups.length - 1].t1, seg && seg.n ? segEnd(seg) : -Infinity);
  return seg && seg.n ? segEnd(seg) : 0;
}

// ---- messages from the decoder ----
function onMessages(messages) {
  for (const m of messages) {
    switch (m.type) {
      case "header":
        info = m.info;
        showInfo();
        wantMap();
        break;
      case "trailer":
        info = m.info;
        showInfo();
        wantMap();
        break;
      case "damage":
        // Stepped over: playing goes on, and the page says what was lost. A stream known
        // to be cut short (no index) ends inside a chunk: that is its end, not damage.
        if (cutShort && /truncated stream/.test(m.message)) {
          note("the stream was cut short (a session that did not finish): it plays as far as it goes");
        } else if (!(status.mode === "live" && /sequence/i.test(m.message))) {
          fail(`damaged stream (stepped over): ${m.message}`);
        }
        break;
      case "error":
        fail(`cannot decode: ${m.message}`);
        break;
      case "end":
        streamEnded = true;
        break;
      default:
        break;
    }
  }
}

function showInfo() {
  if (!info) return;
  $("player").textContent = info.playerName;
  $("song").textContent = `— ${info.songName}${info.mapper ? ` (${info.mapper})` : ""}`;
  $("difficulty").textContent = `${info.difficulty} ${info.mode}`;
  $("modifiers").textContent = info.modifiers ? `· ${info.modifiers}` : "";
  document.title = `${info.playerName} — ${info.songName}`;
}

function fail(text) {
  status.lastError = text;
  const el = $("error");
  el.textContent = text;
  el.hidden = false;
}

let noteTimer = 0;
function note(text) {
  const el = $("banner");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(noteTimer);
  noteTimer = setTimeout(() => { el.hidden = true; }, 2500);
}

// ---- the map and its song ----
// Where the map comes from: `&map=URL` (this page's origin only: its CSP allows no other), a
// zip dropped on the page, or the relay's `maps/HASH.zip` for the replay's hash (the first 40
// hex digits of the info's). It never holds a frame: the scene is the replay's own until the
// map is in.
function mapSays(text) {
  put("unknowns", text);
}

function wantMap() {
  if (mapTried || !info) return;
  mapTried = true;
  const given = params.get("map");
  const hash = String(info.hash ?? "").slice(0, 40).toLowerCase();
  if (given) {
    let url;
    try {
      url = new URL(given, location.href);
    } catch {
      url = null;
    }
    if (!url || url.origin !== location.origin) {
      mapSays("no map: &map= must name a zip on this page's own origin; the scene is rebuilt from the replay's events");
      status.mapState = "refused";
      return;
    }
    useMap(fetchMap(url.href), `&map=${given}`);
  } else if (/^[0-9a-f]{40}$/.test(hash)) {
    useMap(fetchMap(`maps/${hash}.zip`), "the relay");
  } else {
    mapSays("no map (the replay names no map hash): the scene is rebuilt from the replay's events");
  }
}

async function useMap(bytes, from) {
  status.mapState = "loading";
  const want = String(info?.hash ?? "").slice(0, 40).toLowerCase();
  try {
    const b = await bytes;
    if (!b) {
      status.mapState = "missing";
      mapSays(`no map ${want} here: the scene is rebuilt from the replay's events (dodged bombs and untouched walls leave none)`);
      return;
    }
    const m = await loadMap(b, info);
    status.map = mapStatus(m, from);
    if (!m.matched) {
      status.mapState = "mismatch";
      mapSays(`the map (${from}) is ${m.hash}, not the replay's ${want || "(none)"}: the replay plays from its events`);
      return;
    }
    map = m;
    status.map.eventsMatched = matchEvents(map, notes);
    status.mapState = "matched";
    mapSays(`map ${m.hash} (${from}): ${m.difficulty} ${m.mode}, NJS ${m.njs}, jump distance ` +
      `${m.jumpDistance.toFixed(2)} m (${m.jdFrom === "replay" ? "the replay's" : "the game's rule"})`);
    if (m.song) music.load(m.song());
  } catch (e) {
    status.mapState = "failed";
    mapSays(`the map (${from}) cannot be read (${e.message}): the scene is rebuilt from the replay's events`);
  }
}

// bsorStatus.map: the map's figures, and (read when asked, never in a frame) the objects in
// view at the song time shown, with their positions in the game's coordinates.
function mapStatus(m, from) {
  const st = { hash: m.hash, matched: m.matched, from, ...m.counts, njs: m.njs, halfJump: m.halfJump,
    jumpDistance: m.jumpDistance, startBpm: m.startBpm, eventsMatched: 0 };
  Object.defineProperty(st, "inView", {
    enumerable: true,
    get() {
      if (map !== m || status.songTime === null) return null;
      const t = status.songTime;
      const { njs, half } = jumpAt(m, t);
      const found = { t, njs, halfJump: half, objects: [], walls: [], arcs: [] };
      mapScene(t, gridShift(t), collector(found));
      return found;
    },
  });
  return st;
}

const FATES = ["none", "cut", "bad cut", "miss", "bomb"];
function collector(found) {
  return {
    object(o, x, y, z) {
      found.objects.push({ kind: o.kind, time: o.t, line: o.line, layer: o.layer, x, y, z, rot: o.rot,
        fate: o.event ? FATES[o.event.outcome] ?? "none" : "none" });
    },
    effect() {},
    wall(w, x0, x1, y0, y1, z0, z1) {
      found.walls.push({ time: w.t, end: w.t1, x0, x1, y0, y1, z0, z1, rot: w.rot });
    },
    arc(a, head, tail) {
      found.arcs.push({ time: a.t, end: a.t1, mid: a.mid, rot: a.rot, head: [...head], tail: [...tail], beads: [] });
    },
    bead(x, y, z) {
      found.arcs[found.arcs.length - 1].beads.push([x, y, z]);
    },
  };
}

// ---- the worker ----
// The decoder is fetched and compiled here, from the page's start, while the worker
// starts (a worker starts a few tens of ms, and under load a few hundred, after the page's
// script), and handed to it compiled; the worker fetches it itself if this fails.
const compiled = typeof WebAssembly.compileStreaming === "function"
  ? WebAssembly.compileStreaming(fetch("bsor_stream.wasm")) : Promise.reject(new Error("no compileStreaming"));
// A classic worker (worker.js imports nothing), and index.html preloads main.js's imports:
// both start the worker sooner (stored replay's first frame, median of 11 loads under a
// load average of 19: 775 ms without them, 646 ms with them).
const worker = new Worker("worker.js");
compiled.then((module) => worker.postMessage({ op: "module", module }),
  () => worker.postMessage({ op: "module", module: null }));
let netState = "";
let messageWork = 0; // ms spent on the decoder's messages since the last frame
worker.onmessage = (ev) => {
  if (!sceneTried) makeScene();
  const t0 = performance.now();
  handle(ev.data);
  messageWork += performance.now() - t0;
};

function handle(m) {
  status.bytesFetched = m.bytes ?? status.bytesFetched;
  status.reads = m.reads ?? status.reads;
  if (m.eventsTo !== undefined) {
    eventsTo = m.eventsTo;
    status.eventsTo = Number.isFinite(eventsTo) ? eventsTo : "all";
  }
  if (m.type === "layout") {
    FRAME_FLOATS = m.frameFloats;
    EVENT_FLOATS = m.eventFloats;
  } else if (m.type === "data") {
    if (status.mode === "live" && m.frames.length && totalFrames > 0) liveEventsTo = liveEdge();
    if (m.frames.length) addFrames(m.frames, m.group ?? -1);
    if (m.group !== undefined && groups) groups[m.group].state = "loaded";
    if (m.events.length) addEvents(m.events);
    onMessages(m.messages);
    lastArrival = performance.now();
  } else if (m.type === "gap") {
    status.gaps[m.state] = (status.gaps[m.state] ?? 0) + 1;
    if (m.state === "failed") note(`the events of skipped chunks did not come (${m.detail}): the score misses them`);
  } else if (m.type === "backlog") {
    backlog = m.state;
    status.backlog = m.state;
    if (m.state === "loading") backlogSince = performance.now();
    if (m.state === "failed") note(`the score before the join point is not available (${m.detail})`);
  } else if (m.type === "groups") {
    groups = m.groups.map((g) => ({ ...g, state: null }));
    // The worker reads the group at the start time by itself, first.
    if (groups[m.loading]) groups[m.loading].state = "loading";
    streamEnded = true; // a stored stream with its index is whole
  } else if (m.type === "net") {
    netState = m.state;
    if (m.state === "partial") cutShort = true;
    if (m.state === "error") fail(m.detail);
    else if (m.state === "ended") { streamEnded = true; endedDetail = m.detail; }
    else if (m.state === "reconnecting" || m.state === "skipped" || m.state === "partial") note(m.detail);
    else if (m.state === "subscribed" && totalFrames === 0) put("mode", `live · waiting for ${m.detail}`);
    else if (m.state === "done") {
      streamEnded = true;
      status.eventsTo = "all"; // a whole read: every event is in
      if (totalFrames === 0 && status.lastError === null) {
        fail("this replay has no frames (a stream that holds only its header, or an empty file): nothing to play");
      }
    }
  }
}
worker.onerror = (e) => fail(`the decoder worker failed: ${e.message}`);

// ---- playback ----
let playing = true;
let speed = 1;
let playhead = null; // song time shown
let followLive = false;
let lastArrival = 0;
let camera = "behind";

function start(mode, msg) {
  $("controls").hidden = false;
  resetData();
  afterSeek = true;
  status.mode = mode;
  status.ready = true;
  followLive = mode === "live";
  $("live").hidden = mode !== "live";
  worker.postMessage(msg, msg.bytes ? [msg.bytes] : []);
}

// The song time asked for by &t=, or null.
function startAt() {
  const t0 = Number(params.get("t"));
  return Number.isFinite(t0) && t0 > 0 ? t0 : null;
}

let afterSeek = true;
function seek(t) {
  afterSeek = true;
  if (playhead !== null && t < playhead) {
    for (const n of notes) n.shown = false;
  }
  playhead = t;
}

function step(dt) {
  if (totalFrames === 0 && !groups) return;
  const first = firstTime();
  const last = liveEdge();
  // Live: no frame past the events that are in (until the stream ends).
  const shown = status.mode === "live" && !streamEnded ? Math.min(last, liveEventsTo) : last;
  if (playhead === null) {
    if (status.mode === "live") playhead = Math.max(first, Math.min(last - LIVE_DELAY, shown));
    else playhead = Math.min(startAt() ?? first, last);
  }
  if (status.mode === "live" && followLive && !streamEnded) {
    // Follow the newest frame; a tab that fell far behind jumps to it (the relay has
    // already moved it to the newest keyframe group when its queue overflowed).
    if (last - playhead > 3) playhead = Math.min(last - LIVE_DELAY, shown);
    else if (playing) playhead = Math.min(playhead + dt * songSpeed(info), shown);
  } else if (playing && !(groups && !loaded(playhead))) {
    // (A stored stream's part, or the events before it, not loaded yet: wait for them.)
    playhead = Math.min(playhead + dt * speed * songSpeed(info), last);
  }
  if (playhead < first) playhead = first;
}

// A stored stream read by ranges: whether song time t can be shown (its keyframe group and
// every event before it are in).
function loaded(t) {
  return t < eventsTo && frameAt(t) !== null;
}

// A stored stream read by ranges: the keyframe group at t, and while playing the next one
// shortly before it is needed.
function groupAt(t) {
  let k = 0;
  while (k + 1 < groups.length && groups[k + 1].t0 <= t) k++;
  return k;
}

function want(k) {
  const g = groups[k];
  if (g && g.state === null) {
    g.state = "loading";
    worker.postMessage({ op: "group", index: k });
  }
}

function wantGroups(t) {
  const k = groupAt(t);
  want(k);
  if (playing && groups[k].t1 - t < 1.5) want(k + 1);
}

// ---- the view ----
// The WebGL context, its shaders and its drawing buffer are made once the worker has
// started (its first message), while it reads the first bytes: making them takes the
// main thread from a few tens to a few hundred ms, and a worker does not start while the
// page's main thread is busy.
let sceneView = null;
let sceneTried = false;
function makeScene() {
  if (sceneTried) return;
  sceneTried = true;
  try {
    sceneView = new Scene($("view"));
  } catch (e) {
    fail(`cannot draw: ${e.message}`);
  }
}

// A cut's score popping up at a scene point: moved by transform and opacity only, so that
// nothing is laid out again in a frame.
const popups = [];
function popup(x, y, z, text, miss) {
  const el = document.createElement("div");
  el.className = miss ? "popup miss" : "popup";
  el.textContent = text;
  $("popups").appendChild(el);
  popups.push({ el, x, y, z, born: playhead, shown: true });
  while (popups.length > 24) popups.shift().el.remove();
}

const xy = new Float64Array(2);
function movePopups(t) {
  for (const p of popups) {
    const age = (t - p.born) / 0.7;
    const visible = age >= 0 && age <= 1 && sceneView.project(p.x, p.y, p.z, xy);
    if (visible !== p.shown) {
      p.shown = visible;
      p.el.hidden = !visible;
    }
    if (!visible) continue;
    p.el.style.transform = `translate(${xy[0].toFixed(1)}px, ${(xy[1] - age * 40).toFixed(1)}px) translate(-50%, -50%)`;
    p.el.style.opacity = (1 - age).toFixed(2);
  }
}

const gridShift = (t) => jumpOffset(heightAt(info, heights, t));

// A note's place in the scene at song time t (the game's z mirrored, as scene.js does): the
// lane and row grid with the jump offset, and z = (spawn time − t) · NJS + reach (place.js).
const noteX = (n) => laneX(n.line);
const noteY = (n, shift) => rowY(n.layer) + shift;
const noteZ = (n, t) => -((n.spawn - t) * fit.njs + fit.reach);

const view = new View();

// ---- the map's scene ----
// What is seen of the map at song time t (its jump offset `shift`), handed to `sink` (the
// drawing below, or bsorStatus.map.inView's collector), in the game's coordinates: each note,
// bomb and chain link at its lane, rising into its row (the jump, map.js objectAt), and
// z = (its time − t) · NJS from half the jump distance ahead until it is cut or hit (then
// its effect, 0.5 s) or, missed or dodged, half the jump distance behind; walls from their
// time to their end; arcs as beads along their curve (map.js arcSegments).
const gp = new Float64Array(3);
const ARC_BEADS = 16;
function mapScene(t, shift, sink) {
  const m = map;
  const { njs, half } = jumpAt(m, t);
  const reach = half * njs;
  const objs = m.objects;
  const from = t - Math.max(half, 0.6) - 0.1;
  let lo = 0;
  let hi = objs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (objs[mid].t < from) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < objs.length; i++) {
    const o = objs[i];
    if (o.t > t + half) break;
    const e = o.event;
    const hitAt = e && e.outcome !== 3 ? e.t : Infinity;
    if (t < hitAt) {
      // (In view by its depth in its lane, before a 90/360-degree map's turn.)
      const z = (o.t - t) * njs;
      if (z >= -reach && z <= reach) {
        objectAt(m, o, t, shift, gp);
        sink.object(o, gp[0], gp[1], gp[2]);
      }
    } else if (t - hitAt < 0.5) {
      objectAt(m, o, hitAt, shift, gp);
      sink.effect(o, e, gp[0], gp[1], gp[2], (t - hitAt) / 0.5);
    }
    if (e && !e.shown && t >= e.t && t - e.t < 0.3) {
      objectAt(m, o, Math.min(e.t, hitAt), shift, gp);
      sink.event(o, e, gp[0], gp[1], gp[2]);
    }
  }
  for (const w of m.walls) {
    if (w.t > t + half) break;
    const z0 = (w.t - t) * njs;
    const z1 = (w.t1 - t) * njs;
    if (z1 < -reach) continue;
    sink.wall(w, w.x0, w.x1, w.y0, w.y1, z0, z1);
  }
  for (const a of m.arcs) {
    if (a.t > t + half) break;
    if ((a.t1 - t) * njs < -reach) continue;
    // The ends at their notes' rows, half a note along their directions when a note or bomb
    // is there; beads along the curve (map.js, arcSegments), moved with the ends' jump; all
    // turned with the head's lane.
    const [hx, hy] = a.headOn ? dirVector(a.dir) : [0, 0];
    const [tx, ty] = a.tailOn ? dirVector(a.tdir) : [0, 0];
    const head = [laneX(a.line) + hx * ARC_ATTACH, rowAt(a.layer) + shift + hy * ARC_ATTACH, (a.t - t) * njs];
    const tail = [laneX(a.tline) - tx * ARC_ATTACH, rowAt(a.tlayer) + shift - ty * ARC_ATTACH, (a.t1 - t) * njs];
    const segs = arcSegments(a, head, tail);
    // The ends on notes follow their jump (map.js objectAt's parabola), and the curve with them.
    const uh = Math.min(1, Math.abs(a.t - t) / half);
    const ut = Math.min(1, Math.abs(a.t1 - t) / half);
    const hOff = a.headY0 === null ? 0 : -(rowAt(a.layer) + shift - a.headY0) * uh * uh;
    const tOff = a.tailY0 === null ? 0 : -(rowAt(a.tlayer) + shift - a.tailY0) * ut * ut;
    const L = tail[2] - head[2];
    const moved = (p) => {
      p[1] += arcJumpY(hOff, tOff, p[2] - head[2], L, reach);
      return p;
    };
    sink.arc(a, turn(moved([...head]), a.rot), turn(moved([...tail]), a.rot));
    const per = ARC_BEADS / segs.length;
    for (let s = 0; s < segs.length; s++) {
      for (let k = s ? 1 : 0; k <= per; k++) {
        bezierAt(segs[s], k / per, gp);
        if (gp[2] < -reach || gp[2] > reach) continue;
        moved(gp);
        if (a.rot) turn(gp, a.rot);
        sink.bead(gp[0], gp[1], gp[2], a.color);
      }
    }
  }
}

// The map's scene into `view` (the scene's z is the game's mirrored).
const drawSink = {
  object(o, x, y, z) {
    view.note(x, y, -z, o.kind === "bomb" ? -1 : o.color, o.dir, 1, o.kind === "link", (-o.rot * Math.PI) / 180);
  },
  effect(o, e, x, y, z, age) {
    const kind = e.outcome === 1 ? 0 : e.outcome === 2 ? 1 : 2;
    const c = e.cut;
    view.effect(x, y, -z, o.color, age, kind, c ? c[3] : 0, c ? c[4] : 0, c ? -c[5] : 0);
  },
  event(o, e, x, y, z) {
    e.shown = true;
    const text = e.outcome === 1 ? String(e.points) : e.outcome === 2 ? "bad cut"
      : e.outcome === 3 ? "miss" : e.outcome === 4 ? "bomb" : "";
    if (text) popup(x, y, -z, text, e.outcome !== 1);
    if (e.outcome === 1 || e.outcome === 2) music.hit();
  },
  wall(w, x0, x1, y0, y1, z0, z1) {
    // (Its lane's frame: its centre turned with the lane, and the box with it.)
    const c = turn([(x0 + x1) / 2, (y0 + y1) / 2, (z0 + z1) / 2], w.rot);
    view.wall(c[0], c[1], -c[2], x1 - x0, y1 - y0, Math.max(0.02, z1 - z0), (-w.rot * Math.PI) / 180);
  },
  arc() {},
  bead(x, y, z, color) {
    view.bead(x, y, -z, color);
  },
};

// Fills `view` with what is seen at song time t.
function buildView(t) {
  if (map) {
    view.clear();
    mapScene(t, gridShift(t), drawSink);
    return;
  }
  const jd = info && info.jumpDistance > 1 && info.jumpDistance < 100 ? info.jumpDistance : 18;
  const njs = fit.njs;
  const ahead = jd / 2 / njs;
  const shift = gridShift(t);
  view.clear();
  // Notes sorted by event time: look at those near t.
  let lo = 0;
  let hi = notes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (notes[mid].t < t - 0.8) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < notes.length; i++) {
    const n = notes[i];
    if (n.t > t + ahead + 0.3) break;
    if (t < n.spawn - (jd / 2 - fit.reach) / njs) continue;
    const x = noteX(n);
    const y = noteY(n, shift);
    if (t < n.t) {
      view.note(x, y, noteZ(n, t), n.color, n.dir, 1, n.scoring === 7);
    } else {
      const age = (t - n.t) / 0.5;
      if (n.outcome === 3 && age < 1) {
        view.note(x, y, noteZ(n, t), n.color, n.dir, 1 - age, n.scoring === 7);
      }
      if (age < 1) {
        const kind = n.outcome === 1 ? 0 : n.outcome === 2 ? 1 : n.outcome === 4 ? 2 : 3;
        // The cut plane's normal, the game's z mirrored as the scene's.
        const c = n.cut;
        view.effect(x, y, noteZ(n, n.t), n.color, age, kind, c ? c[3] : 0, c ? c[4] : 0, c ? -c[5] : 0);
      }
      if (!n.shown && t - n.t < 0.3) {
        n.shown = true;
        const text = n.outcome === 1 ? String(n.points) : n.outcome === 2 ? "bad cut"
          : n.outcome === 3 ? "miss" : n.outcome === 4 ? "bomb" : "";
        if (text) popup(x, y, noteZ(n, n.t), text, n.outcome !== 1);
      }
    }
  }
  for (const w of walls) {
    if (w.t > t + ahead + 0.5) break;
    const z0 = (w.t - t) * njs;
    if (z0 < -2.5 || z0 > jd / 2) continue;
    const width = Math.max(1, Math.min(4, w.width)) * 0.6;
    const left = (w.line - 2) * 0.6;
    const y0 = w.type === 1 ? 1.4 + shift : 0;
    const y1 = 3.2 + shift;
    view.wall(left + width / 2, (y0 + y1) / 2, -(z0 + 0.5), width, y1 - y0, 1);
  }
}

const workTimes = new Float64Array(4096);
const drawTimes = new Float64Array(4096);
let workCount = 0;
let drawMs = 0;
// The page's own work per rendered frame (ms, p50 and p99 of the last 4096), for the
// benchmark (scripts/browser/bench.mjs); the first 10 frames (shader compilation) excluded.
// `p50`/`p99`: decoding (the worker's messages), scene update and draw calls; `update`:
// the same without the draw calls; `draw`: the draw calls alone (WebGL's calls, which may
// wait for the GPU process). `bsorPerfRestart()` counts from the next frame.
window.bsorPerfRestart = () => {
  if (workCount > 10) workCount = 10;
};
window.bsorPerf = () => {
  const n = Math.min(Math.max(0, workCount - 10), workTimes.length);
  const quantiles = (a) => {
    const s = Array.from(a.subarray(0, n)).sort((x, y) => x - y);
    const q = (p) => (n ? s[Math.min(n - 1, Math.floor(p * n))] : null);
    return { p50: q(0.5), p99: q(0.99) };
  };
  const all = quantiles(workTimes);
  const draw = quantiles(drawTimes);
  const update = quantiles(workTimes.map((w, i) => w - drawTimes[i]));
  return { frames: n, p50: all.p50, p99: all.p99, update, draw };
};

const pacer = new Pacer(params.get("rate") ?? "auto");
status.drawRate = pacer.half ? "half" : "full";
function paced(now) {
  if (!pacer.frame(now)) return;
  status.drawRate = pacer.half ? "half" : "full";
  status.rateChanges = pacer.changes;
  if (pacer.half) note(`drawing every other frame (${pacer.lastChange})`);
}
// An animation frame that is not drawn (at half rate).
function rest(now) {
  paced(now);
  requestAnimationFrame(tick);
}

let lastNow = performance.now();
let shownPause = null;
let askingGesture = false;
function tick(now) {
  paced(now);
  if (!sceneTried && totalFrames > 0) makeScene();
  if (sceneView && totalFrames === 0) {
    try {
      sceneView.ready();
    } catch (e) {
      fail(`cannot draw: ${e.message}`);
      sceneView = null;
    }
  }
  const started = performance.now();
  const dt = Math.min(0.25, (now - lastNow) / 1000);
  lastNow = now;
  step(dt);
  if (groups && playhead !== null) wantGroups(playhead);
  const waiting = (groups && playhead >= eventsTo) ||
    (status.mode === "live" && !streamEnded && !(playhead <= liveEventsTo)) ||
    (backlog === "loading" && performance.now() - backlogSince < BACKLOG_WAIT);
  const at = playhead === null || waiting ? null : frameAt(playhead);
  if (sceneView && at) {
    const seg = at.seg;
    const i = at.i;
    // The trail: the frames of the last 80 ms or so (at most 12).
    let j = i;
    while (j > 0 && i - j < 12 && segTime(seg, j - 1) > segTime(seg, i) - 0.08) j--;
    const t = playhead;
    // At the end of a finished stream the HUD is the replay's result: events after its last
    // frame (a note cut as the recording stopped) count too.
    const atEnd = streamEnded && t >= liveEdge() && eventsTo === Infinity;
    score.advanceTo(atEnd ? Infinity : t);
    buildView(t);
    view.data = seg.data;
    view.stride = FRAME_FLOATS;
    view.at = i * FRAME_FLOATS;
    view.from = j * FRAME_FLOATS;
    view.camera = camera;
    const drawStart = performance.now();
    try {
      sceneView.render(view);
      drawMs = performance.now() - drawStart;
    } catch (e) {
      fail(`cannot draw: ${e.message}`);
      sceneView = null;
      return;
    }
    movePopups(t);
    status.framesRendered++;
    status.samples = sceneView.samples;
    status.glError = sceneView.smoothError;
    if (status.firstFrameTime === null) {
      status.firstFrameTime = performance.now();
      performance.mark("bsor-first-frame"); // where the benchmark's trace starts counting
    }
    status.songTime = t;
    if (map && status.mapFirstFrame === null) status.mapFirstFrame = performance.now();
    updateHud(t);
    if (afterSeek) {
      // The first frame shown after a start or a seek, with its HUD (for the tests).
      afterSeek = false;
      status.afterSeek = { songTime: t, score: status.score, combo: status.combo, misses: status.misses,
        shownScore: $("score").textContent, frame: status.framesRendered };
    }
    const endT = liveEdge();
    status.ended = streamEnded && t >= endT;
    let paused = null;
    for (const p of pauses) if (p.t <= t && t < p.t + 2) paused = p;
    if (paused && paused !== shownPause) note(`the player paused for ${paused.duration} s`);
    shownPause = paused;
  }
  // The song, at the song time shown (paused while the page waits for data).
  if (music.state === "ready") {
    const rate = status.mode === "live" && followLive ? songSpeed(info) : speed * songSpeed(info);
    music.sync(playhead ?? 0, playing && at !== null && !status.ended, rate, now);
    const ask = music.needsGesture;
    if (ask !== askingGesture) {
      askingGesture = ask;
      $("sound").hidden = !ask;
    }
  }
  // The page's own work for this frame: the decoder's messages handled since the last
  // frame and this frame's scene update and draw calls.
  if (status.framesRendered > 0) {
    const work = performance.now() - started + messageWork;
    if (workCount >= 10) {
      workTimes[(workCount - 10) % workTimes.length] = work;
      drawTimes[(workCount - 10) % drawTimes.length] = drawMs;
    }
    workCount++;
  }
  messageWork = 0;
  drawMs = 0;
  requestAnimationFrame(pacer.half ? rest : tick);
}

function clock(t) {
  const s = Math.max(0, Math.floor(t));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

// The HUD's elements and what each shows: an element is written only when its text
// changes (a write costs the page its layout again).
const shownText = new Map();
function put(id, text) {
  let e = shownText.get(id);
  if (!e) {
    e = { el: $(id), text: null };
    shownText.set(id, e);
  }
  if (e.text !== text) {
    e.text = text;
    e.el.textContent = text;
  }
}

const timeline = $("timeline");
const shownRange = { min: NaN, max: NaN, value: NaN };
function putRange(key, v) {
  if (shownRange[key] !== v) {
    shownRange[key] = v;
    timeline[key] = String(v);
  }
}

function updateHud(t) {
  const s = score.state;
  status.score = s.total;
  status.combo = s.combo;
  status.misses = s.misses;
  put("score", String(s.total));
  put("accuracy", s.max > 0 ? `${((100 * s.total) / s.max).toFixed(2)}%` : "-");
  put("combo", String(s.combo));
  put("mult", `x${s.multiplier}`);
  put("misses", String(s.misses));
  put("bombs", String(s.bombs));
  putRange("min", firstTime());
  putRange("max", liveEdge());
  if (!dragging) putRange("value", t);
  put("clock", clock(t));
  put("length", clock(liveEdge()));
  put("play", playing ? "pause" : "play");
  if (status.mode === "live") {
    const behind = liveEdge() - t;
    const since = (performance.now() - lastArrival) / 1000;
    put("latency", streamEnded ? "stream ended"
      : `${(behind * 1000).toFixed(0)} ms behind the newest frame; last data ${since.toFixed(1)} s ago` +
        (netState === "reconnecting" ? " · reconnecting" : ""));
    // Joined late without the events before (no archive, or they did not come in time):
    // said for as long as the score is shown, the end included.
    const joined = backlog !== null && backlog !== "done"
      ? ` · joined at ${clock(firstTime())}: the score counts from there` : "";
    put("mode", (streamEnded ? `live · ended: ${endedDetail}`
      : followLive ? "live" : "live (paused or rewound)") + joined);
  } else {
    put("mode", status.mode === "file" ? "local file" : "stored replay");
    put("latency", streamEnded ? "" : "loading…");
  }
}

// ---- controls ----
let dragging = false;
$("timeline").addEventListener("input", (e) => {
  dragging = true;
  followLive = false;
  seek(Number(e.target.value));
});
$("timeline").addEventListener("change", () => { dragging = false; });
$("play").addEventListener("click", () => togglePlay());
$("live").addEventListener("click", () => goLive());
$("speed").addEventListener("change", (e) => { speed = Number(e.target.value); });
$("camera").addEventListener("change", (e) => { camera = e.target.value; });
// The song: where the browser wants a gesture first, the page asks (#sound); any click or key
// on the page is one.
$("sound").addEventListener("click", () => music.resume());
window.addEventListener("pointerdown", () => music.resume());
window.addEventListener("keydown", () => music.resume());
$("mute").addEventListener("click", () => {
  music.setMuted(!music.muted);
  $("mute").textContent = music.muted ? "unmute" : "mute";
});
$("volume").addEventListener("input", (e) => music.setVolume(Number(e.target.value)));
$("hits").addEventListener("change", (e) => { music.hits = e.target.checked; });
// For tests: the song's state, and where its sound goes.
window.bsorMusic = music;

function togglePlay() {
  playing = !playing;
  if (!playing) followLive = false;
}

function goLive() {
  if (status.mode !== "live") return;
  followLive = true;
  playing = true;
  seek(liveEdge() - LIVE_DELAY);
}

const SPEEDS = [0.25, 0.5, 0.75, 1, 1.5, 2];
window.addEventListener("keydown", (e) => {
  if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
  const cams = { 1: "first", 2: "behind", 3: "side" };
  if (e.key === " " || e.key === "k") { togglePlay(); e.preventDefault(); }
  else if (e.key === "ArrowLeft" || e.key === "j") { followLive = false; seek(Math.max(0, (playhead ?? 0) - 5)); }
  else if (e.key === "ArrowRight" || e.key === "l") seek(Math.min(liveEdge(), (playhead ?? 0) + 5));
  else if (e.key === "L") goLive();
  else if (cams[e.key]) { camera = cams[e.key]; $("camera").value = camera; }
  else if (e.key === "+" || e.key === "-") {
    const i = SPEEDS.indexOf(speed) + (e.key === "+" ? 1 : -1);
    speed = SPEEDS[Math.max(0, Math.min(SPEEDS.length - 1, i))];
    $("speed").value = String(speed);
  }
});

// Dropping a file (or choosing one) plays it; a dropped .zip is the map of what plays.
function playFile(file) {
  if (/\.zip$/i.test(file.name)) {
    if (!info) {
      note("drop the replay first, then its map's zip");
      return;
    }
    mapTried = true;
    map = null;
    music.unload();
    useMap(file.arrayBuffer().then((b) => new Uint8Array(b)), "a dropped zip");
    return;
  }
  $("list").hidden = true;
  $("error").hidden = true;
  status.lastError = null;
  playhead = null;
  file.arrayBuffer().then((bytes) => start("file", { op: "file", bytes }));
}
window.addEventListener("dragover", (e) => { e.preventDefault(); document.body.classList.add("dragging"); });
window.addEventListener("dragleave", () => document.body.classList.remove("dragging"));
window.addEventListener("drop", (e) => {
  e.preventDefault();
  document.body.classList.remove("dragging");
  const f = e.dataTransfer.files[0];
  if (f) playFile(f);
});
$("file").addEventListener("change", (e) => {
  const f = e.target.files[0];
  if (f) playFile(f);
});

// ---- the session list ----
async function showList() {
  $("list").hidden = false;
  $("controls").hidden = true; // nothing to play yet
  status.mode = "list";
  try {
    const res = await fetch("sessions");
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const { sessions } = await res.json();
    const body = $("sessions");
    body.replaceChildren();
    for (const s of sessions) {
      const tr = document.createElement("tr");
      const a = document.createElement("a");
      const key = s.live ? "session" : "replay";
      a.href = `?${key}=${encodeURIComponent(s.name)}`;
      a.textContent = s.name;
      const cells = [a, s.player, s.song, `${s.difficulty} ${s.mode}`, s.live ? "live" : "ended",
        clock(Number(s.duration) || 0), String(s.viewers)];
      for (const c of cells) {
        const td = document.createElement("td");
        if (c instanceof Node) td.appendChild(c);
        else td.textContent = String(c ?? "");
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    $("listNote").textContent = sessions.length ? "" : "No sessions yet.";
  } catch (e) {
    $("listNote").textContent = `The session list is not available here (${e.message}).`;
  }
  status.ready = true;
}

function wsUrl() {
  const given = params.get("ws");
  if (given) return given;
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
}

const NAME = /^[A-Za-z0-9._-]{1,64}$/;
if (params.has("session")) {
  const name = params.get("session");
  if (!NAME.test(name) || /^\.+$/.test(name)) fail("the session name must be 1 to 64 of A-Z a-z 0-9 . _ -");
  else start("live", { op: "live", url: wsUrl(), session: name });
} else if (params.has("replay")) {
  const name = params.get("replay");
  if (!NAME.test(name) || /^\.+$/.test(name)) fail("the replay name must be 1 to 64 of A-Z a-z 0-9 . _ -");
  else start("replay", { op: "ranges", url: `replays/${encodeURIComponent(name)}.bsors`, t: startAt() });
} else if (params.has("src")) {
  start("replay", { op: "ranges", url: params.get("src"), t: startAt() });
} else {
  showList();
}

// The placement's figures, on screen: the jump speed (fitted, or assumed before enough cuts)
// and the jump distance (the info's).
function showPlacement() {
  if (map) {
    put("speedNote", `note jump speed ${map.njs} m/s (the map's) · jump distance ${map.jumpDistance.toFixed(1)} m ` +
      `(${map.jdFrom === "replay" ? "from the replay" : "the game's rule"})`);
  } else {
    showFitted();
  }
  status.njs = fit.njs;
  status.njsCuts = fit.n;
  status.audio = { state: music.state, error: music.error, context: music.ctx ? music.ctx.state : null,
    needsGesture: music.needsGesture, restarts: music.restarts, muted: music.muted, volume: music.volume };
}
function showFitted() {
  const jd = info && info.jumpDistance > 1 && info.jumpDistance < 100 ? `${info.jumpDistance.toFixed(1)} m (from the replay)`
    : "18 m (assumed)";
  const njs = fit.fitted ? `${fit.njs.toFixed(1)} m/s (fitted from ${fit.n} cuts; notes reach ${fit.reach.toFixed(2)} m at their time)`
    : `${fit.njs} m/s (assumed: too few cuts to fit)`;
  put("speedNote", `note jump speed ${njs} · jump distance ${jd}`);
}
setInterval(showPlacement, 500);
requestAnimationFrame(tick);
