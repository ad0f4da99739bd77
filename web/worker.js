// The decoder's Web Worker: runs the project's decoder (bsor_stream.wasm, the Rust crate
// bsor-stream-wasm) on bytes from a WebSocket (live), HTTP ranges (stored replay or ?src=)
// or a dropped file, and posts what it decodes to the page with transferable buffers:
//   {type:"data", frames:Float32Array (records of 22), events:Float32Array (records of 18),
//    messages:[...], bytes:INT}
//   {type:"net", state:STRING, detail:STRING}   connection state for the page to show
// The page sends {op:"live", url, session} | {op:"ranges", url} | {op:"file", bytes}, and
// {op:"group", index} for a keyframe group of the stored stream being read by ranges.

let wasm = null;
// The page sends the module compiled ({op: "module", module}), or null when it could not.
let fromPage;
const pageModule = new Promise((ok) => { fromPage = ok; });
// The records' layout comes from the module, to the page before any record.
function layout() {
  postMessage({ type: "layout", frameFloats: wasm.frame_floats(), eventFloats: wasm.event_floats() });
}
const ready = (async () => {
  const module = await pageModule;
  if (module) {
    wasm = (await WebAssembly.instantiate(module, {})).exports;
    layout();
    return;
  }
  const res = await fetch("bsor_stream.wasm");
  if (!res.ok) throw new Error(`bsor_stream.wasm: HTTP ${res.status}`);
  // Compiled while it downloads when served as application/wasm (the relay does).
  const { instance } = res.headers.get("content-type") === "application/wasm"
    ? await WebAssembly.instantiateStreaming(res, {})
    : await WebAssembly.instantiate(await res.arrayBuffer(), {});
  wasm = instance.exports;
  layout();
})();
ready.catch(() => {}); // reported to the page when a source comes

const enc = new TextEncoder();
let bytesIn = 0;
let generation = 0; // bumps on every new source, so stale callbacks stop

function input(bytes) {
  const at = wasm.input_reserve(bytes.length);
  new Uint8Array(wasm.memory.buffer, at, bytes.length).set(bytes);
}

// The last call's messages (the decoder's JSON output).
function outputMessages() {
  const mem = wasm.memory.buffer;
  const text = new TextDecoder().decode(new Uint8Array(mem, wasm.output_ptr(), wasm.output_len()));
  try {
    return JSON.parse(text);
  } catch (e) {
    return [{ type: "error", message: `decoder output: ${e.message}` }];
  }
}

// Copies the last call's results out of the module's memory and posts them.
function collect(code) {
  const mem = wasm.memory.buffer;
  const frames = new Float32Array(mem, wasm.frames_ptr(), wasm.frames_len()).slice();
  const events = new Float32Array(mem, wasm.events_ptr(), wasm.events_len()).slice();
  const messages = outputMessages();
  if (frames.length || events.length || messages.length) {
    postMessage({ type: "data", frames, events, messages, bytes: bytesIn },
      [frames.buffer, events.buffer]);
  }
  return code === 0;
}

function net(state, detail = "") {
  postMessage({ type: "net", state, detail: String(detail), bytes: bytesIn, reads });
}

// The most a classic BSOR may be here (the longest real ones are a few MB).
const MAX_BSOR = 256 << 20;

// A stored stream or classic BSOR, by magic: a stream is decoded as it arrives, a classic
// BSOR (its sections are in file order, frames before notes) once it is whole.
class Sink {
  // count: whether the bytes pushed are counted as fetched here (a dropped file's are).
  constructor(count = true) {
    this.count = count;
    this.head = new Uint8Array(0);
    this.kind = null; // "stream" | "bsor"
    this.parts = [];
    this.size = 0;
    this.ok = true;
  }
  push(bytes) {
    if (!this.ok) return;
    if (this.count) bytesIn += bytes.length;
    if (this.size + bytes.length > MAX_BSOR) {
      this.ok = false;
      net("error", `the file is over ${MAX_BSOR >> 20} MiB: not a replay this page plays`);
      return;
    }
    if (this.kind === null) {
      const h = new Uint8Array(this.head.length + bytes.length);
      h.set(this.head);
      h.set(bytes, this.head.length);
      if (h.length < 4) { this.head = h; return; }
      this.kind = h[0] === 0x42 && h[1] === 0x53 && h[2] === 0x52 && h[3] === 0x53 ? "stream" : "bsor";
      this.head = new Uint8Array(0);
      if (this.kind === "stream") wasm.stream_begin();
      bytes = h;
    }
    if (this.kind === "stream") {
      input(bytes);
      this.ok = collect(wasm.stream_push());
    } else {
      this.parts.push(bytes);
      this.size += bytes.length;
    }
  }
  finish() {
    if (!this.ok) return;
    if (this.kind === "stream") {
      collect(wasm.stream_finish());
    } else {
      const all = new Uint8Array(this.size + this.head.length);
      let at = 0;
      for (const p of [this.head, ...this.parts]) { all.set(p, at); at += p.length; }
      this.parts = [];
      input(all);
      collect(wasm.bsor_load());
    }
  }
}

// ---- a stored stream read by HTTP ranges (format.md 13, 14, 17) ----
// Reads the header and the footer at once, then the index, then the keyframe group at the
// start and every event chunk at once (in at most EVENT_READS reads), then keyframe groups
// as the page asks for them. A server that does not answer ranges gets one whole read; a
// stream without a footer or an index (cut short) is read whole and played as far as it
// goes, as a dropped file is.

// The first read, for the stream header (its info block is usually a few hundred bytes;
// a longer one takes more reads).
const HEAD_GUESS = 512;
// The event chunks are read in at most this many reads, each a stretch of the file from
// one event chunk to another (the frame chunks between included): a long, dense replay has
// thousands of event chunks, and a read for each overruns the browser's own limit on
// requests in flight (and a relay's pace). Header, footer, index, the first group and these:
// at most 12 requests to open a stored replay.
const EVENT_READS = 8;
// Tries of one read before it is reported as failed (network, 5xx, or an answer that is not
// the bytes asked for).
const TRIES = 4;
let stored = null; // {url, size, groups: [{offset, end, t0, t1}], gen}
let reads = 0; // HTTP requests of the current source

class Refused extends Error {}

const sleep = (ms) => new Promise((ok) => { setTimeout(ok, ms); });

// Bytes `from` to `to` of `url` (inclusive; `to` may be past the end, which the server cuts),
// or with `from` null its last `to` bytes: {bytes, size}, and `whole` when the server sent
// the whole file (a 200; `bytes` is then the part asked for). The browser's cache is never
// used (a cached answer to a range, or a 304 to a condition the cache added, is not the
// bytes asked for). An answer must be exactly what was asked: a 206 whose Content-Range is
// the range asked and whose body has its length, or a whole 200. Anything else (short,
// another range, a network error, a 5xx) is read again, with a pause that doubles, and
// after TRIES reported as a failed read: never handed to the decoder, never "damage".
async function read(url, from, to) {
  let why = "";
  const spec = from === null ? `-${to}` : `${from}-${to}`;
  for (let k = 0; k < TRIES; k++) {
    if (k) await sleep(100 * 2 ** k);
    let res;
    let body;
    try {
      reads++;
      res = await fetch(url, { headers: { Range: `bytes=${spec}` }, cache: "no-store" });
      if (res.status !== 200 && res.status !== 206) {
        why = `HTTP ${res.status} ${(await res.text()).slice(0, 200)}`.trim();
        if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
          throw new Refused(why);
        }
        continue;
      }
      body = new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      if (e instanceof Refused) throw e;
      why = e.message;
      continue;
    }
    const declared = res.headers.get("content-length");
    if (declared !== null && Number(declared) !== body.length) {
      why = `${body.length} of ${declared} bytes`;
      continue;
    }
    if (res.status === 200) {
      const size = body.length;
      const a = from === null ? Math.max(0, size - to) : from;
      const b = from === null ? size - 1 : Math.min(to, size - 1);
      bytesIn += size;
      return { bytes: body.subarray(a, b + 1), size, whole: body };
    }
    const cr = res.headers.get("content-range") || "";
    const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(cr);
    if (m) {
      const size = Number(m[3]);
      const a = from === null ? Math.max(0, size - to) : from;
      const b = from === null ? size - 1 : Math.min(to, size - 1);
      if (Number(m[1]) === a && Number(m[2]) === b && body.length === b - a + 1) {
        bytesIn += body.length;
        return { bytes: body, size };
      }
    }
    why = `asked bytes ${spec}, got "${cr}" with ${body.length} bytes`;
  }
  throw new Error(`bytes ${spec}: ${why} (${TRIES} tries)`);
}

function text() {
  return new TextDecoder().decode(new Uint8Array(wasm.memory.buffer, wasm.output_ptr(), wasm.output_len()));
}

// Decodes a whole file (or as much of one as there is) as a dropped file is.
function whole(parts, why) {
  if (why) net("partial", why);
  const sink = new Sink(false);
  for (const p of parts) sink.push(p);
  sink.finish();
  net("done", why || "");
}

// t: the song time the page starts at (null: the start).
async function rangesSource(url, gen, t) {
  net("fetching", url);
  // The header's and the footer's reads go out at once, while the decoder compiles.
  const tail = read(url, null, 16);
  tail.catch(() => {});
  let first;
  try {
    const pending = read(url, 0, HEAD_GUESS - 1);
    pending.catch(() => {});
    try {
      await ready;
    } catch (e) {
      net("error", `could not load the decoder: ${e.message}`);
      return;
    }
    first = await pending;
  } catch (e) {
    net("error", `could not read ${url}: ${e.message}` + (e instanceof Refused ? ""
      : " (the page's Content-Security-Policy lets it read only its own origin: a URL elsewhere is refused)"));
    return;
  }
  if (gen !== generation) return;
  if (first.whole) {
    whole([first.whole], "");
    return;
  }
  const { size } = first;
  let head = first.bytes;
  const isStream = head[0] === 0x42 && head[1] === 0x53 && head[2] === 0x52 && head[3] === 0x53;
  if (size > MAX_BSOR) {
    net("error", `${url}: over ${MAX_BSOR >> 20} MiB: not a replay this page plays`);
    return;
  }
  if (!isStream) {
    // A classic BSOR: the rest, then the whole.
    const rest = size > head.length ? (await read(url, head.length, size - 1)).bytes : new Uint8Array(0);
    if (gen === generation) whole([head, rest], "");
    return;
  }
  // 1. The header.
  let hlen = 0;
  for (;;) {
    input(head);
    hlen = wasm.seek_header();
    if (hlen !== 0 || head.length >= size) break;
    const more = (await read(url, head.length, Math.min(size, head.length * 4) - 1)).bytes;
    const h = new Uint8Array(head.length + more.length);
    h.set(head);
    h.set(more, head.length);
    head = h;
  }
  if (hlen === 0) {
    net("error", `${url}: the stream ends inside its header (${size} bytes): nothing to play`);
    return;
  }
  if (!collect(hlen > 0 ? 0 : -1)) return;
  // 2. The footer; 3. the index. Either missing or unreadable: the stream was cut short
  // (a relay stopped mid-song, a copy that ended early), and is read whole.
  const footBytes = (await tail).bytes;
  let entries = null;
  let indexAt = 0;
  input(footBytes);
  if (size >= hlen + 16 && wasm.seek_footer() === 0) {
    indexAt = JSON.parse(text())[0].indexOffset;
    if (indexAt >= hlen && indexAt < size - 16) {
      input((await read(url, indexAt, size - 17)).bytes);
      if (wasm.seek_index() === 0) entries = JSON.parse(text())[0].entries; // [type, offset, first, count, t0, t1]
    }
  }
  if (gen !== generation) return;
  const next = (k) => (k + 1 < entries.length ? entries[k + 1][1] : indexAt);
  if (entries && !entries.every((e, k) => e[1] >= hlen && e[1] < next(k))) entries = null;
  if (!entries) {
    const rest = size > head.length ? (await read(url, head.length, size - 1)).bytes : new Uint8Array(0);
    if (gen === generation) {
      whole([head, rest], "the stream has no index (it was cut short): it plays as far as it goes");
    }
    return;
  }
  // The keyframe groups, loaded when the page asks.
  const keys = entries.map((e, k) => [e, k]).filter(([e]) => e[0] === 1);
  const groups = keys.map(([e], i) => {
    const end = i + 1 < keys.length ? keys[i + 1][0][1]
      : (entries.find((x) => x[0] === 4)?.[1] ?? indexAt);
    return { offset: e[1], end, t0: e[4], t1: e[5] };
  });
  if (!groups.length) {
    net("error", `${url}: the stream has no frames (it holds only its header): nothing to play`);
    return;
  }
  stored = { url, size, groups, gen };
  // The event chunks, in stream order, and where a keyframe chunk comes between two.
  const chunks = [];
  let newGroup = 0;
  entries.forEach((e, k) => {
    if (e[0] === 1) newGroup = 1;
    if (e[0] !== 3) return;
    chunks.push({ from: e[1], to: next(k), newGroup, t0: e[3] > 0 && Number.isFinite(e[4]) ? e[4] : Infinity });
    newGroup = 0;
  });
  // Events before `after[k]` are all in chunks before k (a chunk's t0 is its earliest event).
  const after = new Float64Array(chunks.length + 1).fill(Infinity);
  for (let k = chunks.length - 1; k >= 0; k--) after[k] = Math.min(after[k + 1], chunks[k].t0);
  let start = 0;
  while (start + 1 < groups.length && t !== null && groups[start + 1].t0 <= t) start++;
  // The reads: the events the start group's frames need (every chunk whose earliest event
  // is not after the group's end) end a read of their own, so that the first frame waits
  // for them only; the others are split where the gaps between event chunks are largest.
  const startCut = chunks.findIndex((c) => c.t0 > groups[start].t1);
  const forced = startCut > 0 ? [startCut] : [];
  const cuts = chunks.slice(1).map((c, k) => [c.from - chunks[k].to, k + 1])
    .filter(([, k]) => k !== startCut)
    .sort((a, b) => b[0] - a[0]).slice(0, EVENT_READS - 1 - forced.length).map(([, k]) => k)
    .concat(forced).sort((a, b) => a - b);
  const spans = [0, ...cuts].map((k, i) => {
    const end = i < cuts.length ? cuts[i] : chunks.length;
    return { first: k, end, from: chunks[k].from, to: chunks[end - 1].to };
  }).filter((s) => s.end > s.first);

  postMessage({ type: "groups", groups: groups.map((g) => ({ t0: g.t0, t1: g.t1 })),
    loading: start, eventsTo: after[0], bytes: bytesIn, reads });
  // The group the page starts at and every event chunk, read at once (the page shows a
  // frame only once the events before it are in: the HUD is right from the first frame).
  loadGroup(start).catch((e) => net("error", `a keyframe group: ${e.message}`));
  const pending = spans.map((s) => read(url, s.from, s.to - 1));
  pending.forEach((p) => p.catch(() => {}));
  for (let i = 0; i < spans.length; i++) {
    let got;
    try {
      got = await pending[i];
    } catch (e) {
      if (gen === generation) net("error", `${url}: the event chunks: ${e.message}`);
      return;
    }
    if (gen !== generation) return;
    const s = spans[i];
    // Decoded chunk by chunk, posted as one message per read (a message per chunk made the
    // page sort its lists once per chunk).
    const parts = [];
    const messages = [];
    let floats = 0;
    for (let k = s.first; k < s.end; k++) {
      const c = chunks[k];
      // From its index entry to the next: the module reads the chunk at its start.
      input(got.bytes.subarray(c.from - s.from, c.to - s.from));
      wasm.seek_events(c.newGroup);
      const part = new Float32Array(wasm.memory.buffer, wasm.events_ptr(), wasm.events_len()).slice();
      parts.push(part);
      floats += part.length;
      messages.push(...outputMessages());
    }
    const all = new Float32Array(floats);
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    postMessage({ type: "data", frames: new Float32Array(0), events: all, messages,
      eventsTo: after[s.end], bytes: bytesIn, reads }, [all.buffer]);
  }
}

async function loadGroup(i) {
  const s = stored;
  const g = s && s.groups[i];
  if (!g) return;
  const { bytes } = await read(s.url, g.offset, g.end - 1);
  if (s !== stored || s.gen !== generation) return;
  wasm.group_begin();
  input(bytes);
  wasm.stream_push();
  const frames = new Float32Array(wasm.memory.buffer, wasm.frames_ptr(), wasm.frames_len()).slice();
  postMessage({ type: "data", group: i, frames, events: new Float32Array(0), messages: [],
    bytes: bytesIn, reads }, [frames.buffer]);
}

// ---- live: wire.md over WebSocket, one frame per binary message ----
// The protocol is the module's (the core's client state machine, proto-spec/wire.md):
// this only carries bytes between the WebSocket and the module, keeps the timer it asks
// for, and reads the events of chunks the viewer did not get from the relay's HTTP.

class Live {
  constructor(url, session, gen) {
    this.url = url;
    this.session = session;
    this.gen = gen;
    this.ws = null;
    this.timer = 0;
    this.run(() => { input(enc.encode(session)); return wasm.live_begin(performance.now(), 10000); });
  }
  // Calls the module, then does what it asks: open or close the socket, send bytes, show
  // a state, read events over HTTP; the decoded records go to the page.
  run(call) {
    if (this.gen !== generation) return;
    const code = call();
    const send = new Uint8Array(wasm.memory.buffer, wasm.send_ptr(), wasm.send_len()).slice();
    const frames = new Float32Array(wasm.memory.buffer, wasm.frames_ptr(), wasm.frames_len()).slice();
    const events = new Float32Array(wasm.memory.buffer, wasm.events_ptr(), wasm.events_len()).slice();
    const decoded = [];
    for (const m of outputMessages()) {
      if (m.type === "send") {
        if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(send.subarray(m.from, m.to));
      } else if (m.type === "live") {
        if (m.do === "connect") this.connect();
        else this.close();
      } else if (m.type === "net") {
        net(m.state, m.state === "subscribed" ? this.session : m.detail);
      } else if (m.type === "backlog") {
        this.fetchEvents(m.before, -1);
      } else if (m.type === "gap") {
        this.fetchEvents(m.before, m.after);
      } else {
        decoded.push(m);
      }
    }
    if (frames.length || events.length || decoded.length) {
      postMessage({ type: "data", frames, events, messages: decoded, bytes: bytesIn },
        [frames.buffer, events.buffer]);
    }
    clearTimeout(this.timer);
    const at = wasm.live_deadline();
    if (at >= 0) {
      this.timer = setTimeout(() => this.run(() => wasm.live_timeout(performance.now())),
        Math.max(0, at - performance.now()));
    }
    return code;
  }
  connect() {
    net("connecting", this.url);
    let ws;
    try {
      ws = new WebSocket(this.url, "bsor-stream.v1");
    } catch (e) {
      queueMicrotask(() => this.lost(null, `WebSocket ${this.url}: ${e.message}`));
      return;
    }
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => { if (ws === this.ws) this.run(() => wasm.live_connected(performance.now())); };
    ws.onmessage = (ev) => {
      if (ws !== this.ws) return;
      const bytes = new Uint8Array(ev.data);
      bytesIn += bytes.length;
      this.run(() => { input(bytes); return wasm.live_message(performance.now()); });
    };
    ws.onclose = (ev) => this.lost(ws, `the connection closed (${ev.code}${ev.reason ? ` ${ev.reason}` : ""})`);
  }
  // The socket closed: the module decides whether and when to connect again.
  lost(ws, why) {
    if (ws !== this.ws) return;
    this.ws = null;
    this.run(() => { input(enc.encode(why)); return wasm.live_lost(performance.now()); });
  }
  close() {
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close();
  }
  // The events of the chunks before `before` (after `after`, when a gap is filled: the
  // chunks the relay skipped for this viewer, or those published while it reconnected),
  // from the relay's HTTP (http.md 4.1). A late join says how it went as "backlog", a gap
  // as "gap".
  async fetchEvents(before, after) {
    const kind = after < 0 ? "backlog" : "gap";
    postMessage({ type: kind, state: "loading", bytes: bytesIn });
    const url = new URL(`sessions/${encodeURIComponent(this.session)}/events`, this.httpBase()).href;
    let body = null;
    let why = "";
    // The page may read only its own origin (its Content-Security-Policy): a relay elsewhere
    // (`?ws=`) is refused every time, and retrying only delays the first frame.
    if (new URL(url).origin !== self.location.origin) {
      postMessage({ type: kind, state: "failed", bytes: bytesIn,
        detail: "the relay is not this page's origin, which alone the page may read" });
      return;
    }
    for (let k = 0; k < TRIES && body === null; k++) {
      if (k) await sleep(100 * 2 ** k);
      try {
        reads++;
        const res = await fetch(url, { cache: "no-store" });
        if (res.ok) body = new Uint8Array(await res.arrayBuffer());
        else {
          why = `HTTP ${res.status}`;
          if (res.status === 404) break;
        }
      } catch (e) {
        why = e.message;
      }
    }
    if (this.gen !== generation) return;
    if (body === null) {
      postMessage({ type: kind, state: "failed", detail: why, bytes: bytesIn });
      return;
    }
    bytesIn += body.length;
    input(body);
    const ok = wasm.backlog_events(before, after) === 0;
    const events = new Float32Array(wasm.memory.buffer, wasm.events_ptr(), wasm.events_len()).slice();
    const messages = outputMessages();
    postMessage({ type: "data", frames: new Float32Array(0), events, messages, bytes: bytesIn, reads },
      [events.buffer]);
    postMessage({ type: kind, state: ok ? "done" : "failed",
      detail: ok ? "" : (messages.find((m) => m.type === "error")?.message ?? ""), bytes: bytesIn });
  }
  // The relay's HTTP address: the page's own (the WebSocket's, given as ?ws=, for another).
  httpBase() {
    const u = new URL(this.url);
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    return u.href;
  }
  stop() {
    clearTimeout(this.timer);
    this.gen = -1;
    this.close();
    wasm.live_stop();
  }
}

let live = null;

onmessage = async (ev) => {
  const msg = ev.data;
  if (msg.op === "module") {
    fromPage(msg.module instanceof WebAssembly.Module ? msg.module : null);
    return;
  }
  if (msg.op === "group") {
    loadGroup(msg.index).catch((e) => net("error", `a keyframe group: ${e.message}`));
    return;
  }
  if (msg.op !== "ranges") {
    try {
      await ready;
    } catch (e) {
      net("error", `could not load the decoder: ${e.message}`);
      return;
    }
  }
  generation++;
  if (live) { live.stop(); live = null; }
  bytesIn = 0;
  reads = 0;
  const gen = generation;
  switch (msg.op) {
    case "live":
      live = new Live(msg.url, msg.session, gen);
      break;
    case "ranges":
      stored = null;
      rangesSource(msg.url, gen, Number.isFinite(msg.t) ? msg.t : null).catch((e) => net("error", `${msg.url}: ${e.message}`));
      break;
    case "file": {
      const sink = new Sink();
      sink.push(new Uint8Array(msg.bytes));
      sink.finish();
      net("done", "file");
      break;
    }
    default:
      break;
  }
};
