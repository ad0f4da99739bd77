// The player's figures in headless Chromium (a benchmark, not a test: it asserts nothing):
//   node scripts/browser/bench.mjs target/release/bsor-stream ../shared/corpus
// 1. WebAssembly decoding speed (MB of BSOR a second) of the corpus encoded compact and
//    lossless (live settings), best of 5 runs, next to the native decoder's
//    (`bsor-stream bench --json`, same files, one run each);
// 2. load to first frame (the page's firstFrameTime) for a live session and for a 4-minute
//    stored replay;
// 3. the page's own work per rendered frame (decode messages, scene update and drawing
//    calls, p50 and p99 over 60 s and 10 s of a replay at 1x), in wall-clock time
//    (`performance.now()`, the page's own figure), at the rate the page chooses (web/pace.js)
//    and again with every frame drawn (`&rate=full`), each with the CPU time Chromium's GPU
//    process took meanwhile; then, on another load of the replay, the main thread's CPU
//    time for the same work and the same frames, from a DevTools trace: on a loaded machine
//    the wall-clock figure also counts the time the thread waited for a core;
// 4. with a map served by the relay (`serve --maps`): a 5-minute corpus replay's first frame
//    drawn with its map, and the page's own work per frame with the map and its song
//    (`BSOR_BENCH_ONLY=map` runs this part alone).
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, writeFileSync, rmSync, readdirSync, existsSync, mkdirSync } from "node:fs";
import { tmpdir, loadavg } from "node:os";
import { join, dirname, extname, basename } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { mapFromReplay } from "./mapfixture.mjs";

const here = dirname(fileURLToPath(import.meta.url));
// BSOR_WEB: another checkout's web/ (to compare a change against its parent).
const web = process.env.BSOR_WEB || join(here, "..", "..", "web");
const [bin, corpus] = process.argv.slice(2);
const tmp = mkdtempSync(join(tmpdir(), "bsor-bench-"));
const run = (...a) => execFileSync(bin, a, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const children = [];

const files = readdirSync(corpus).filter((f) => f.endsWith(".bsor")).sort();
const inputs = [];
for (const f of files) {
  for (const profile of ["compact", "lossless"]) {
    const out = `${basename(f, ".bsor")}.${profile}.bsors`;
    run("encode", join(corpus, f), "-o", join(tmp, out), "--profile", profile);
    inputs.push({ name: out, profile, bsorBytes: readFileSync(join(corpus, f)).length });
  }
}
run("synth", "-o", join(tmp, "long.bsor"), "--seconds", "240");
run("encode", join(tmp, "long.bsor"), "-o", join(tmp, "long.bsors"), "--archive");
run("synth", "-o", join(tmp, "live.bsor"), "--seconds", "60");
// As a publisher sends them (a keyframe a second, a flush every 0.1 s: thousands of event
// chunks): a 4-minute replay and the densest of the corpus (the largest file).
run("encode", join(tmp, "long.bsor"), "-o", join(tmp, "long-live.bsors"), "--profile", "compact");
const densest = files.map((f) => [f, readFileSync(join(corpus, f)).length]).sort((a, b) => b[1] - a[1])[0][0];
const densestName = `${basename(densest, ".bsor")}.compact.bsors`;

console.log(`load average at the start: ${loadavg().map((x) => x.toFixed(2)).join(" ")} (1, 5, 15 min)`);
const native = JSON.parse(run("bench", "--json", corpus));
const nativeSpeed = {};
for (const profile of ["compact", "lossless"]) {
  let bytes = 0;
  let secs = 0;
  for (const f of native.files) {
    bytes += f.bsorBytes;
    secs += f.streams[`${profile}/live`].decodeSeconds;
  }
  nativeSpeed[profile] = bytes / secs / 1e6;
}

const CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; " +
  "connect-src 'self' ws: wss:; img-src 'self' data: blob:; style-src 'self'; object-src 'none'";
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css",
  ".wasm": "application/wasm" };
const server = createServer((req, res) => {
  const name = new URL(req.url, "http://x").pathname.slice(1) || "index.html";
  const file = [join(web, basename(name)), join(tmp, basename(name))].find((f) => existsSync(f));
  if (!file) { res.writeHead(404); res.end(); return; }
  const headers = { "Content-Type": TYPES[extname(file)] || "application/octet-stream",
    "Content-Security-Policy": CSP };
  const body = readFileSync(file);
  // Single byte ranges, as the relay answers them (proto-spec/http.md 5.1).
  const r = /^bytes=(\d*)-(\d+)$/.exec(req.headers.range || "");
  if (r && (r[1] === "" || Number(r[1]) < body.length)) {
    const [a, b] = r[1] === "" ? [Math.max(0, body.length - Number(r[2])), body.length - 1]
      : [Number(r[1]), Math.min(Number(r[2]), body.length - 1)];
    res.writeHead(206, { ...headers, "Content-Range": `bytes ${a}-${b}/${body.length}` });
    res.end(body.subarray(a, b + 1));
    return;
  }
  res.writeHead(200, headers);
  res.end(body);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}/`;

writeFileSync(join(tmp, "token"), "secret\n");
const relay = spawn(bin, ["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--token-file",
  join(tmp, "token"), "--allow-origin", base.slice(0, -1)], { stdio: ["ignore", "pipe", "ignore"] });
children.push(relay);
const addr = await new Promise((ok) => {
  let out = "";
  relay.stdout.on("data", (d) => {
    out += d;
    const m = /listening tcp=(\S+) ws=(\S+)/.exec(out);
    if (m) ok({ tcp: m[1], ws: m[2] });
  });
});

const browser = await chromium.launchPersistentContext(join(tmp, "profile"), {
  executablePath: "/usr/bin/chromium", headless: true, viewport: { width: 960, height: 600 },
  args: ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
    "--disable-gpu-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage();
await page.goto(base);

// 4. With the map: the largest corpus replay (5 minutes) with a map made from its own note
// events (scripts/browser/mapfixture.mjs; its hash written into the replay's info) and a
// click track as long as it for its song, served by a relay (`serve --maps`) that also
// serves the page and the archived replay: the first frame drawn with the map, median of 5
// loads, and the page's own work per rendered frame over 10 s with the map and its song.
// `BSOR_BENCH_ONLY=map` runs this alone.
async function mapBench() {
  const mapsDir = join(tmp, "maps");
  const archive = join(tmp, "map-archive");
  mkdirSync(mapsDir, { recursive: true });
  mkdirSync(archive, { recursive: true });
  const file = files.map((f) => [f, readFileSync(join(corpus, f)).length]).sort((a, b) => b[1] - a[1])[0][0];
  const exported = JSON.parse(execFileSync(bin, ["export", join(corpus, file)],
    { encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "pipe"] }));
  const made = mapFromReplay(exported, tmp);
  writeFileSync(join(mapsDir, `${made.hash}.zip`), made.bytes);
  const bsor = Buffer.from(readFileSync(join(corpus, file)));
  const old = Buffer.from(exported.info.hash);
  const at = bsor.indexOf(old);
  if (old.length !== 40 || at < 0) throw new Error(`${file}: its hash is not 40 characters`);
  Buffer.from(made.hash.toUpperCase()).copy(bsor, at);
  writeFileSync(join(tmp, "mapped.bsor"), bsor);
  run("encode", join(tmp, "mapped.bsor"), "-o", join(archive, "mapped.bsors"), "--archive");
  const mapRelay = spawn(bin, ["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--token-file",
    join(tmp, "token"), "--archive", archive, "--maps", mapsDir], { stdio: ["ignore", "pipe", "ignore"] });
  children.push(mapRelay);
  const ws = await new Promise((ok) => {
    let out = "";
    mapRelay.stdout.on("data", (d) => {
      out += d;
      const m = /ws=(\S+)/.exec(out);
      if (m) ok(m[1]);
    });
  });
  const url = `http://${ws}/?replay=mapped`;
  const firsts = [];
  const mapFirsts = [];
  for (let i = 0; i < 5; i++) {
    const p = await browser.newPage();
    await p.goto(url);
    await p.waitForFunction(() => window.bsorStatus.mapFirstFrame !== null || window.bsorStatus.mapState === "failed" ||
      window.bsorStatus.mapState === "mismatch", null, { timeout: 20000 });
    const s = await p.evaluate(() => window.bsorStatus);
    if (s.mapState !== "matched") console.log(`  map: ${s.mapState}`);
    firsts.push(s.firstFrameTime);
    mapFirsts.push(s.mapFirstFrame);
    await p.close();
  }
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
  console.log(`${file} (${(exported.frames.at(-1).time / 60).toFixed(1)} min) with its map from the relay ` +
    `(${made.bytes.length} bytes): first frame ${med(firsts).toFixed(0)} ms, first frame with the map ` +
    `${med(mapFirsts).toFixed(0)} ms after navigation start (median of 5; ${Math.min(...mapFirsts).toFixed(0)} to ` +
    `${Math.max(...mapFirsts).toFixed(0)})`);
  const p = await browser.newPage();
  await p.goto(url);
  await p.waitForFunction(() => window.bsorStatus.mapFirstFrame !== null, null, { timeout: 20000 });
  await p.waitForTimeout(5000);
  await p.evaluate(() => window.bsorPerfRestart());
  await p.waitForTimeout(10000);
  const perf = await p.evaluate(() => window.bsorPerf());
  const st = await p.evaluate(() => window.bsorStatus);
  console.log(`own work per rendered frame with the map and its song: p50 ${perf.p50.toFixed(2)} ms, p99 ` +
    `${perf.p99.toFixed(2)} ms over ${perf.frames} frames (drawing at ${st.drawRate} rate; song ${st.audio?.state}, ` +
    `context ${st.audio?.context})`);
  console.log(`  of which decoding and scene update: p50 ${perf.update.p50.toFixed(2)} ms, p99 ${perf.update.p99.toFixed(2)} ms;` +
    ` draw calls: p50 ${perf.draw.p50.toFixed(2)} ms, p99 ${perf.draw.p99.toFixed(2)} ms`);
  await p.close();
  mapRelay.kill("SIGTERM");
}
if (process.env.BSOR_BENCH_ONLY === "map") {
  await mapBench();
  await browser.close();
  for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
  server.close();
  rmSync(tmp, { recursive: true, force: true });
  process.exit(0);
}

// 1. Decoding in WebAssembly, in the page's main thread (the worker runs the same code).
const speeds = await page.evaluate(async (inputs) => {
  const { instance } = await WebAssembly.instantiate(await (await fetch("bsor_stream.wasm")).arrayBuffer(), {});
  const w = instance.exports;
  const out = [];
  for (const inp of inputs) {
    const bytes = new Uint8Array(await (await fetch(inp.name)).arrayBuffer());
    let best = Infinity;
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      w.stream_begin();
      const at = w.input_reserve(bytes.length);
      new Uint8Array(w.memory.buffer, at, bytes.length).set(bytes);
      if (w.stream_push() !== 0 || w.stream_finish() !== 0) throw new Error(`${inp.name} failed`);
      best = Math.min(best, performance.now() - t0);
    }
    out.push({ ...inp, ms: best });
  }
  return out;
}, inputs);
for (const profile of ["compact", "lossless"]) {
  const mine = speeds.filter((s) => s.profile === profile);
  const bytes = mine.reduce((n, s) => n + s.bsorBytes, 0);
  const ms = mine.reduce((n, s) => n + s.ms, 0);
  const mbs = bytes / (ms / 1000) / 1e6;
  console.log(`wasm decode ${profile}: ${mbs.toFixed(1)} MB/s of BSOR; native ${nativeSpeed[profile].toFixed(1)} MB/s` +
    ` (${((100 * mbs) / nativeSpeed[profile]).toFixed(0)}%)`);
}

// 2. Load to first frame.
const pub = spawn(bin, ["publish", "--to", addr.tcp, "--session", "bench", "--token-file",
  join(tmp, "token"), join(tmp, "live.bsor")], { stdio: "ignore" });
children.push(pub);
await new Promise((ok) => setTimeout(ok, 3000));
const live = await browser.newPage();
await live.goto(`${base}?session=bench&ws=${encodeURIComponent(`ws://${addr.ws}/`)}`);
await live.waitForFunction(() => window.bsorStatus.firstFrameTime !== null, null, { timeout: 20000 });
const liveFirst = await live.evaluate(() => window.bsorStatus.firstFrameTime);
console.log(`live session: first frame ${liveFirst.toFixed(0)} ms after navigation start`);
await live.close();

// The 4-minute stored replay (archive settings): median of 9 loads, with the range.
const storedFirsts = [];
for (let i = 0; i < 9; i++) {
  const stored = await browser.newPage();
  await stored.goto(`${base}?src=long.bsors`);
  await stored.waitForFunction(() => window.bsorStatus.firstFrameTime !== null, null, { timeout: 20000 });
  storedFirsts.push(await stored.evaluate(() => window.bsorStatus.firstFrameTime));
  await stored.close();
}
storedFirsts.sort((a, b) => a - b);
console.log(`4-minute stored replay (${readFileSync(join(tmp, "long.bsors")).length} bytes): first frame ` +
  `${storedFirsts[4].toFixed(0)} ms after navigation start (median of 9; ${storedFirsts[0].toFixed(0)} to ` +
  `${storedFirsts[8].toFixed(0)})`);

// Stored replays as a publisher's archive holds them: the first frame (its HUD includes
// every event before it), every event in, and the requests, median of 5 loads each.
for (const [label, name] of [["4-minute replay, publisher's settings", "long-live.bsors"],
  [`densest corpus replay (${densest})`, densestName]]) {
  for (const t of [null, 60]) {
    const first = [];
    const all = [];
    let reads = 0;
    for (let i = 0; i < 5; i++) {
      const p = await browser.newPage();
      await p.goto(`${base}?src=${name}${t === null ? "" : `&t=${t}`}`);
      await p.waitForFunction(() => window.bsorStatus.firstFrameTime !== null && window.bsorStatus.eventsTo === "all",
        null, { timeout: 20000 });
      const s = await p.evaluate(() => ({ ...window.bsorStatus, now: performance.now() }));
      first.push(s.firstFrameTime);
      all.push(s.now);
      reads = Math.max(reads, s.reads);
      if (s.lastError) console.log(`  error: ${s.lastError}`);
      await p.close();
    }
    const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
    console.log(`${label}${t === null ? "" : `, &t=${t}`}: first frame ${med(first).toFixed(0)} ms after navigation ` +
      `start (median of 5; every event in by ${med(all).toFixed(0)} ms or sooner), ${reads} requests at most`);
  }
}

// 3. Own work per frame over 10 s of playing.
// CPU time (user and system, in clock ticks of 10 ms) of Chromium's GPU process, which
// renders WebGL in software on this machine.
const gpuTicks = () => {
  let ticks = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("--type=gpu-process")) continue;
      const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // the process ended
    }
  }
  return ticks;
};
// Measured from 5 s after the first frame (past the first decision of web/pace.js, about
// 3 s in at 60 Hz): at the page's rate for 60 s, which take in its tries of the full rate
// (10 s after it falls back to half rate, then 20 s after the next fall; 2 s each), and
// with every frame drawn for 10 s.
const ownWork = async (p, label, seconds) => {
  await p.waitForTimeout(5000);
  await p.evaluate(() => window.bsorPerfRestart());
  const g0 = gpuTicks();
  await p.waitForTimeout(seconds * 1000);
  const gpu = (gpuTicks() - g0) / 100 / seconds;
  const perf = await p.evaluate(() => window.bsorPerf());
  const st = await p.evaluate(() => window.bsorStatus);
  console.log(`own work per rendered frame, ${label}: p50 ${perf.p50.toFixed(2)} ms, p99 ${perf.p99.toFixed(2)} ms` +
    ` over ${perf.frames} frames (drawing at ${st.drawRate} rate, ${st.rateChanges} rate changes; GPU process ${gpu.toFixed(2)} cores)`);
  console.log(`  of which decoding and scene update: p50 ${perf.update.p50.toFixed(2)} ms, p99 ${perf.update.p99.toFixed(2)} ms;` +
    ` draw calls: p50 ${perf.draw.p50.toFixed(2)} ms, p99 ${perf.draw.p99.toFixed(2)} ms`);
};
{
  const rate = await browser.newPage();
  await rate.goto(`${base}?src=long.bsors`);
  await rate.waitForFunction(() => window.bsorStatus.firstFrameTime !== null, null, { timeout: 20000 });
  await ownWork(rate, "the page's rate", 60);
  await rate.close();
}
{
  const full = await browser.newPage();
  await full.goto(`${base}?src=long.bsors&rate=full`);
  await full.waitForFunction(() => window.bsorStatus.firstFrameTime !== null, null, { timeout: 20000 });
  await ownWork(full, "every frame drawn", 10);
  await full.close();
}

// The same work in CPU time: a trace of another load of the replay at the page's rate,
// counted from 5 s after its first frame (the page's mark) for 10 s, as above.
{
  const again = await browser.newPage();
  const cdp = await browser.newCDPSession(again);
  const events = [];
  cdp.on("Tracing.dataCollected", (e) => events.push(...e.value));
  const complete = new Promise((ok) => cdp.on("Tracing.tracingComplete", ok));
  await cdp.send("Tracing.start", { categories: "devtools.timeline,blink.user_timing", transferMode: "ReportEvents" });
  await again.goto(`${base}?src=long.bsors`);
  await again.waitForFunction(() => window.bsorStatus.firstFrameTime !== null, null, { timeout: 20000 });
  const frameId = (await cdp.send("Page.getFrameTree")).frameTree.frame.id;
  await again.waitForTimeout(15000);
  await cdp.send("Tracing.end");
  await complete;
  // On the page's main thread, from its first frame: each drawn animation frame (the
  // tick; frames left undrawn at half rate call `rest` instead), plus the calls into the
  // page's code since the frame before (the worker's messages).
  const mark = events.find((e) => e.name === "bsor-first-frame");
  const raf = events.filter((e) => e.name === "FireAnimationFrame" && e.ph === "X" && e.args?.data?.frame === frameId);
  const main = raf.length ? [raf[0].pid, raf[0].tid] : [0, 0];
  const onMain = (e) => e.pid === main[0] && e.tid === main[1] && e.ph === "X";
  const rests = events.filter((e) => onMain(e) && e.name === "FunctionCall" && e.args?.data?.functionName === "rest");
  const undrawn = (e) => rests.some((r) => r.ts >= e.ts && r.ts <= e.ts + e.dur);
  const from = mark ? mark.ts + 5e6 : Infinity;
  const mine = events.filter((e) => onMain(e) && e.ts >= from - 50000 &&
    (e.name === "FireAnimationFrame" ? e.args?.data?.frame === frameId && !undrawn(e)
      : e.name === "FunctionCall" && e.args?.data?.frame === frameId &&
        !["tick", "rest"].includes(e.args?.data?.functionName)))
    .sort((a, b) => a.ts - b.ts);
  const cpu = [];
  let pending = 0;
  for (const e of mine) {
    if (e.name === "FunctionCall") pending += (e.tdur ?? e.dur) / 1000;
    else if (e.ts >= from) {
      cpu.push((e.tdur ?? e.dur) / 1000 + pending);
      pending = 0;
    }
  }
  const s = cpu.sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  if (s.length) {
    console.log(`own work per rendered frame in CPU time (trace): p50 ${q(0.5).toFixed(2)} ms, p99 ${q(0.99).toFixed(2)} ms over ${s.length} frames` +
      ` (${mine.filter((e) => e.name === "FunctionCall").length} calls from messages, ${rests.filter((r) => r.ts >= from).length} frames not drawn)`);
  }
  await again.close();
}

await mapBench();
console.log(`load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
await browser.close();
for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
server.close();
rmSync(tmp, { recursive: true, force: true });
