// The decoder's Web Worker: runs the project's decoder (bsor_stream.wasm, the Rust crate
// bsor-stream-wasm) on bytes from a WebSocket (live), HTTP ranges (stored replay or ?src=)
// or a dropped file, and posts what it decodes to the page with transferable buffers:
//   {type:"data", frames:Float32Array (records of 22), events:Float32Array (records of 12),
//    messages:[...], bytes:INT}
//   {type:"net", state:STRING, detail:STRING}   connection state for the page to show
// The page sends {op:"live", url, session} | {op:"ranges", url} | {op:"file", bytes}, and
// {op:"group", index} for a keyframe group of the stored stream being read by ranges.

let wasm = null;
// The page sends the module compiled ({op: "module", module}), or null when it could not.
let fromPage;
const pageModule = new Promise((ok) => { fromPage = ok; });
const ready = (async () => {
  const module = await pageModule;
  if (module) {
    wasm = (await WebAssembly.instantiate(module, {})).exports;
    return;
  }
  const res = await fetch("bsor_stream.wasm");
  if (!res.ok) throw new Error(`bsor_stream.wasm: HTTP ${res.status}`);
  // Compiled while it downloads when served as application/wasm (the relay does).
  const { instance } = res.headers.get("content-type") === "application/wasm"
    ? await WebAssembly.instantiateStreaming(res, {})
    : await WebAssembly.instantiate(await res.arrayBuffer(), {});
  wasm = instance.exports;
})();
ready.catch(() => {}); // reported to the page when a source comes

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
  postMessage({ type: "net", state, detail: String(detail), bytes: bytesIn });
}

// The most a classic BSOR may be here (the longest real ones are a few MB).
const MAX_BSOR = 256 << 20;

// A stored stream or classic BSOR, by magic: a stream is decoded as it arrives, a classic
// BSOR (its sections are in file order, frames before notes) once it is whole.
class Sink {
  constructor() {
    this.head = new Uint8Array(0);
    this.kind = null; // "stream" | "bsor"
    this.parts = [];
    this.size = 0;
    this.ok = true;
  }
  push(bytes) {
    if (!this.ok) return;
    bytesIn += bytes.length;
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
// Reads the header, the footer, the index and every event chunk, then keyframe groups as
// the page asks for them. A server that does not answer ranges gets a whole fetch instead.

const MAX_CHUNK_HEADER = 34;
// The first read, for the stream header (its info block is usually a few hundred bytes;
// a longer one takes more reads).
const HEAD_GUESS = 512;
let stored = null; // {url, size, groups: [{offset, end, t0, t1}]}

async function range(url, from, to) {
  const res = await fetch(url, { headers: { Range: `bytes=${from}-${to}` } });
  if (res.status !== 206) {
    throw new Error(`${url}: bytes ${from}-${to}: HTTP ${res.status}`);
  }
  const b = new Uint8Array(await res.arrayBuffer());
  bytesIn += b.length;
  return b;
}

function text() {
  return new TextDecoder().decode(new Uint8Array(wasm.memory.buffer, wasm.output_ptr(), wasm.output_len()));
}

// t: the song time the page starts at (null: the start).
async function rangesSource(url, gen, t) {
  net("fetching", url);
  let res;
  // The header's and the footer's reads go out at once, while the decoder compiles.
  const tail = fetch(url, { headers: { Range: "bytes=-16" } });
  tail.catch(() => {});
  try {
    const pending = fetch(url, { headers: { Range: `bytes=0-${HEAD_GUESS - 1}` } });
    await ready;
    res = await pending;
  } catch (e) {
    if (!wasm) {
      net("error", `could not load the decoder: ${e.message}`);
      return;
    }
    net("error", `could not fetch ${url}: ${e.message} (the page's Content-Security-Policy ` +
      `allows only its own origin; a URL elsewhere is refused)`);
    return;
  }
  if (res.status === 200 || (res.ok && res.status !== 206)) {
    // No ranges: read it whole, as it arrives.
    const sink = new Sink();
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (gen !== generation) { reader.cancel(); return; }
      if (done) break;
      sink.push(value);
    }
    sink.finish();
    net("done", url);
    return;
  }
  if (res.status !== 206) {
    const body = (await res.text()).slice(0, 200);
    net("error", `${url}: HTTP ${res.status} ${body}`);
    return;
  }
  const size = Number(/\/(\d+)$/.exec(res.headers.get("content-range") || "")?.[1]);
  let head = new Uint8Array(await res.arrayBuffer());
  bytesIn += head.length;
  const isStream = head[0] === 0x42 && head[1] === 0x53 && head[2] === 0x52 && head[3] === 0x53;
  if (!isStream || !Number.isFinite(size) || size < 16) {
    // A classic BSOR (or no size): the rest, then the whole.
    const sink = new Sink();
    sink.push(head);
    if (Number.isFinite(size) && size > MAX_BSOR) {
      net("error", `${url}: over ${MAX_BSOR >> 20} MiB: not a replay this page plays`);
      return;
    }
    if (Number.isFinite(size) && size > head.length) sink.push(await range(url, head.length, size - 1));
    sink.finish();
    net("done", url);
    return;
  }
  // 1. The header.
  let hlen = 0;
  for (;;) {
    input(head);
    hlen = wasm.seek_header();
    if (hlen !== 0 || head.length >= size) break;
    const more = await range(url, head.length, Math.min(size, head.length * 4) - 1);
    const h = new Uint8Array(head.length + more.length);
    h.set(head);
    h.set(more, head.length);
    head = h;
  }
  if (!collect(hlen > 0 ? 0 : -1)) return;
  // 2. The footer; 3. the index.
  const foot = await tail;
  if (foot.status !== 206) {
    net("error", `${url}: the last 16 bytes: HTTP ${foot.status}`);
    return;
  }
  const footBytes = new Uint8Array(await foot.arrayBuffer());
  bytesIn += footBytes.length;
  input(footBytes);
  if (wasm.seek_footer() !== 0 || gen !== generation) {
    net("error", `${url}: the stream has no footer (it is not finished)`);
    return;
  }
  const indexAt = JSON.parse(text())[0].indexOffset;
  input(await range(url, indexAt, size - 17));
  if (wasm.seek_index() !== 0) { collect(-1); return; }
  const entries = JSON.parse(text())[0].entries; // [type, offset, first, count, t0, t1]
  // 5. The keyframe groups, loaded when the page asks.
  const keys = entries.map((e, k) => [e, k]).filter(([e]) => e[0] === 1);
  const groups = keys.map(([e], i) => {
    const end = i + 1 < keys.length ? keys[i + 1][0][1]
      : (entries.find((x) => x[0] === 4)?.[1] ?? indexAt);
    return { offset: e[1], end, t0: e[4], t1: e[5] };
  });
  stored = { url, size, groups, gen };
  // The group the page starts at is read first, by the worker itself (one message less
  // on the way to the first frame; the page marks it loading); then the event chunks
  // (the first frame needs none of them). The page asks for any other group it needs.
  let first = 0;
  while (first + 1 < groups.length && t !== null && groups[first + 1].t0 <= t) first++;
  postMessage({ type: "groups", groups: groups.map((g) => ({ t0: g.t0, t1: g.t1 })),
    loading: groups.length ? first : -1, bytes: bytesIn });
  if (groups.length) await loadGroup(first);
  if (gen !== generation) return;

  // 4. The event chunks: each one's header, then the rest of it.
  const next = (k) => (k + 1 < entries.length ? entries[k + 1][1] : indexAt);
  const events = entries.map((e, k) => [e, k]).filter(([e]) => e[0] === 3);
  const chunks = await Promise.all(events.map(async ([e, k]) => {
    const end = next(k);
    const prefix = await range(url, e[1], Math.min(end, e[1] + MAX_CHUNK_HEADER) - 1);
    input(prefix);
    const len = wasm.chunk_length();
    if (len <= prefix.length) return prefix.subarray(0, Math.max(0, len));
    const rest = await range(url, e[1] + prefix.length, e[1] + len - 1);
    const all = new Uint8Array(len);
    all.set(prefix);
    all.set(rest, prefix.length);
    return all;
  }));
  if (gen !== generation) return;
  // Decoded chunk by chunk, posted as one message: the page takes them in one go (a
  // message per chunk made the page sort its lists once per chunk, in one frame).
  let newGroup = 0;
  let c = 0;
  const parts = [];
  const messages = [];
  let floats = 0;
  for (const e of entries) {
    if (e[0] === 1) newGroup = 1;
    if (e[0] !== 3) continue;
    input(chunks[c++]);
    wasm.seek_events(newGroup);
    newGroup = 0;
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
  postMessage({ type: "data", frames: new Float32Array(0), events: all, messages, bytes: bytesIn },
    [all.buffer]);
}

async function loadGroup(i) {
  const s = stored;
  const g = s && s.groups[i];
  if (!g) return;
  const bytes = await range(s.url, g.offset, g.end - 1);
  if (s !== stored || s.gen !== generation) return;
  wasm.group_begin();
  input(bytes);
  wasm.stream_push();
  const frames = new Float32Array(wasm.memory.buffer, wasm.frames_ptr(), wasm.frames_len()).slice();
  postMessage({ type: "data", group: i, frames, events: new Float32Array(0), messages: [],
    bytes: bytesIn }, [frames.buffer]);
}

// ---- live: wire.md over WebSocket, one frame per binary message ----

const enc = new TextEncoder();

function frame(type, body) {
  const out = new Uint8Array(5 + body.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, 1 + body.length, true);
  out[4] = type;
  out.set(body, 5);
  return out;
}

function str(s) {
  const b = enc.encode(s);
  const out = new Uint8Array(2 + b.length);
  new DataView(out.buffer).setUint16(0, b.length, true);
  out.set(b, 2);
  return out;
}

function cat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

// The sequence number of a chunk (format.md 4.1: sync, type, varint32 seq).
function chunkSeq(b) {
  let v = 0;
  let shift = 0;
  for (let i = 2; i < Math.min(b.length, 7); i++) {
    v += (b[i] & 0x7f) * 2 ** shift;
    if (!(b[i] & 0x80)) return v;
    shift += 7;
  }
  return -1;
}

const NO_RETRY = new Set([5, 6, 7, 8, 9, 12, 13, 16, 17]);

class Live {
  constructor(url, session, gen) {
    this.url = url;
    this.session = session;
    this.gen = gen;
    this.header = null; // the stream header's bytes
    this.lastSeq = -1;
    this.ended = false;
    this.retries = 0;
    this.connect();
  }
  connect() {
    if (this.gen !== generation) return;
    net("connecting", this.url);
    let ws;
    try {
      ws = new WebSocket(this.url, "bsor-stream.v1");
    } catch (e) {
      net("error", `WebSocket ${this.url}: ${e.message}`);
      return;
    }
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      const hello = new Uint8Array(5);
      const dv = new DataView(hello.buffer);
      dv.setUint16(0, 1, true);
      dv.setUint16(2, 1, true);
      hello[4] = 2; // viewer
      ws.send(frame(0x01, cat(hello, str("bsor-stream-web"))));
    };
    ws.onmessage = (ev) => this.onFrame(new Uint8Array(ev.data));
    ws.onclose = () => {
      if (this.ended || this.fatal || this.gen !== generation) return;
      const delay = Math.min(5000, 250 * 2 ** this.retries++);
      net("reconnecting", `connection lost; again in ${delay} ms`);
      setTimeout(() => this.connect(), delay);
    };
  }
  onFrame(m) {
    if (this.gen !== generation) return;
    if (m.length < 5) return;
    const type = m[4];
    const body = m.subarray(5);
    const dv = new DataView(body.buffer, body.byteOffset, body.byteLength);
    switch (type) {
      case 0x01: { // Hello: subscribe, live mode, wait up to 10 s for the session
        const wait = new Uint8Array(5);
        new DataView(wait.buffer).setUint32(1, 10000, true);
        this.ws.send(frame(0x03, cat(str(this.session), wait)));
        net("subscribed", this.session);
        break;
      }
      case 0x04: { // StreamHeader
        this.retries = 0;
        if (this.header && this.header.length === body.length &&
          this.header.every((v, i) => v === body[i])) break; // the same stream, resumed
        this.header = body.slice();
        this.lastSeq = -1;
        bytesIn += body.length;
        wasm.stream_begin();
        input(body);
        collect(wasm.stream_push());
        break;
      }
      case 0x05: { // Chunk
        const seq = chunkSeq(body);
        if (seq >= 0 && seq <= this.lastSeq) break; // had it before the reconnection
        this.lastSeq = seq;
        bytesIn += body.length;
        input(body);
        collect(wasm.stream_push());
        break;
      }
      case 0x08: // End
        this.ended = true;
        collect(wasm.stream_finish());
        net("ended", body[0] === 0 ? "the song finished" : "the publisher is gone");
        this.ws.close();
        break;
      case 0x09: { // Error
        const code = dv.getUint16(0, true);
        const len = dv.getUint16(2, true);
        const msg = new TextDecoder().decode(body.subarray(4, 4 + len));
        if (NO_RETRY.has(code)) this.fatal = true;
        net(this.fatal ? "error" : "reconnecting", `relay error ${code}: ${msg}`);
        break;
      }
      case 0x0a: // Ping -> Pong
        this.ws.send(frame(0x0b, body));
        break;
      case 0x0c: { // Skipped
        const chunks = dv.getUint32(0, true);
        net("skipped", `fell behind: skipped ${chunks} chunks to the next keyframe group`);
        break;
      }
      default:
        break;
    }
  }
  stop() {
    this.ended = true;
    if (this.ws) this.ws.close();
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
