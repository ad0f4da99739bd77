// The player's tests in a real headless Chromium (Debian's, driven by playwright-core):
// run by scripts/browser-test.sh as `node test.mjs BSOR_STREAM_BINARY`. Starts a relay on
// 127.0.0.1, which serves the page; a static server here (with the relay's headers, CSP
// included) stands for any other host a `?src=` stream comes from. Screenshots
// go to target/browser/. Everything temporary is removed at the end.
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { createServer as createTcpServer, connect as tcpConnect } from "node:net";
import { mkdtempSync, readFileSync, writeFileSync, rmSync, mkdirSync, existsSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, extname, basename } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

import * as fx from "./mapfixture.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const web = join(root, "web");
const shots = join(root, "target", "browser");
const bin = process.argv[2];
mkdirSync(shots, { recursive: true });
const tmp = mkdtempSync(join(tmpdir(), "bsor-browser-"));
const children = [];
let passed = 0;
let failed = 0;

const CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; " +
  "connect-src 'self' ws: wss:; img-src 'self' data: blob:; style-src 'self'; object-src 'none'; " +
  "base-uri 'none'; frame-ancestors 'none'";
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css",
  ".wasm": "application/wasm", ".bsors": "application/octet-stream", ".bsor": "application/octet-stream" };

function run(...args) {
  return execFileSync(bin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

// ---- fixtures ----
const synth = join(tmp, "synthetic.bsor");
run("synth", "-o", synth, "--seconds", "20", "--seed", "7");
const expectedScore = Number(/^score\s+(\d+)/m.exec(run("info", synth))[1]);
const expectedFrames = Number(/(\d+) frames/.exec(run("info", synth))[1]);
const stream = join(tmp, "synthetic.bsors");
run("encode", synth, "-o", stream);

// The same replay with an HTML tag for a player name (bsor-v1.md: magic, version, section
// 0, then the info's strings as int32 length + UTF-8: version, gameVersion, timestamp,
// playerID, playerName).
const HOSTILE = "<img src=x onerror=alert(1)>";
{
  const b = readFileSync(synth);
  let at = 6;
  for (let i = 0; i < 4; i++) at += 4 + b.readInt32LE(at);
  const old = b.readInt32LE(at);
  const name = Buffer.from(HOSTILE);
  const len = Buffer.alloc(4);
  len.writeInt32LE(name.length);
  writeFileSync(join(tmp, "hostile.bsor"), Buffer.concat([b.subarray(0, at), len, name, b.subarray(at + 4 + old)]));
}
// A stream whose header is damaged (a byte of its info block flipped: the header CRC fails).
{
  const b = Buffer.from(readFileSync(stream));
  b[40] ^= 0xff;
  writeFileSync(join(tmp, "damaged.bsors"), b);
}

// The same replay in archive settings (a keyframe group every 10 s): two groups.
const archived = join(tmp, "archived.bsors");
run("encode", synth, "-o", archived, "--archive");

// A dense replay: 300 s at 10 notes a second (more than the densest real replay here, 1,645
// notes in 310 s), encoded as a publisher sends it (a keyframe a second, a flush every
// 0.1 s: thousands of event chunks).
const dense = join(tmp, "dense.bsor");
run("synth", "-o", dense, "--seconds", "300", "--seed", "11", "--notes-per-second", "10");
const denseInfo = run("info", dense);
const denseNotes = Number(/^notes\s+(\d+)/m.exec(denseInfo)[1]);
const denseScore = Number(/^score\s+(\d+)/m.exec(denseInfo)[1]);
run("encode", dense, "-o", join(tmp, "dense.bsors"), "--profile", "compact");
writeFileSync(join(tmp, "flaky-dense.bsors"), readFileSync(join(tmp, "dense.bsors")));
// The same stream cut short (a relay stopped mid-song: no index, no footer), and its header
// alone.
{
  const b = readFileSync(join(tmp, "dense.bsors"));
  writeFileSync(join(tmp, "cut.bsors"), b.subarray(0, Math.floor(b.length * 0.4)));
}

// The HUD at song time t from the project's own library (`info --at`), not from the page.
function hudAt(file, times) {
  const out = run("info", file, ...times.flatMap((t) => ["--at", String(t)]));
  return [...out.matchAll(/^at\s+(\S+) s: score (\d+) combo (\d+) misses (\d+) bombs (\d+)/gm)]
    .map((m) => ({ t: Number(m[1]), score: Number(m[2]), combo: Number(m[3]), misses: Number(m[4]) }));
}

// ---- maps (scripts/browser/mapfixture.mjs): a zip in each format and a replay played on it ----
const mapsDir = join(tmp, "maps");
mkdirSync(mapsDir, { recursive: true });
mkdirSync(join(tmp, "archive"), { recursive: true });
const ogg = fx.clickTrack(tmp);
const mapsMade = {};
for (const v of [2, 3, 4]) {
  const m = fx.mapZip(v, ogg);
  // On the relay by its hash; in the temporary folder (the static server's) by its version.
  writeFileSync(join(mapsDir, `${m.hash}.zip`), m.bytes);
  writeFileSync(join(tmp, `map-v${v}.zip`), m.bytes);
  // v2's replay gives its jump distance (16 m); v3's and v4's none (the game's rule). The
  // hash in uppercase, as BeatLeader writes it. v2 and v4 are played in the 90Degree
  // characteristic (their lanes turn), v3 in Standard (the same file: they do not).
  const jd = v === 2 ? 16 : 0;
  const bsor = join(tmp, `map-v${v}.bsor`);
  writeFileSync(bsor, fx.replay(m.hash.toUpperCase(), { jd, mode: v === 3 ? "Standard" : "90Degree" }));
  run("encode", bsor, "-o", join(tmp, "archive", `map-v${v}.bsors`), "--archive");
  writeFileSync(join(tmp, `map-v${v}.bsors`), readFileSync(join(tmp, "archive", `map-v${v}.bsors`)));
  mapsMade[v] = { hash: m.hash, jd, bsor };
}
// map-v3's play with Faster Song (1.2x): the same map.
{
  const bsor = join(tmp, "map-fs.bsor");
  writeFileSync(bsor, fx.replay(mapsMade[3].hash, { jd: 0, modifiers: "FS" }));
  run("encode", bsor, "-o", join(tmp, "archive", "map-fs.bsors"), "--archive");
}
// A map for a live session: v3's objects, its song's clicks at irregular song times (gaps of
// 0.35 to 0.75 s, never repeating), so that a song started anywhere but at the song time
// shown cannot line up with them; its replay, published live by the test.
const LIVE_CLICKS = [];
for (let t = 0.25, k = 1; t < fx.SONG_SECONDS; k++) {
  LIVE_CLICKS.push(t);
  t += 0.35 + 0.4 * ((k * 0.6180339887) % 1);
}
{
  const m = fx.mapZip(3, fx.clickTrack(tmp, fx.SONG_SECONDS, "live-click", LIVE_CLICKS), { title: "Irregular Clicks" });
  writeFileSync(join(mapsDir, `${m.hash}.zip`), m.bytes);
  writeFileSync(join(tmp, "map-live.bsor"), fx.replay(m.hash));
}
// A zip whose difficulty entry inflates past the size it claims.
writeFileSync(join(tmp, "map-lie.zip"), fx.mapZip(3, ogg, { lie: true }).bytes);
// A replay of a map the relay does not have.
{
  const bsor = join(tmp, "map-none.bsor");
  writeFileSync(bsor, fx.replay("ab".repeat(20), { jd: 0 }));
  run("encode", bsor, "-o", join(tmp, "archive", "map-none.bsors"), "--archive");
}

// ---- servers ----
// The static server answers single byte ranges as the relay does (proto-spec/http.md) and
// keeps what it served: `served` lists [name, first, last] byte ranges, one per request, and
// `conditional` the requests that carried a cache condition (If-None-Match and the like),
// which it answers 304 as the relay does. A file named `flaky-*` gets every third range
// answered with only the first half of it (a proxy's or a broken server's short answer).
const served = [];
const conditional = [];
let flakyCount = 0;
const relayServed = [];
function serveStatic() {
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const name = url.pathname === "/" ? "index.html" : basename(url.pathname);
    const file = [join(web, name), join(tmp, name)].find((f) => existsSync(f) && name !== "README.md");
    if (!file) { res.writeHead(404); res.end("not found"); return; }
    const body = readFileSync(file);
    const headers = { "Content-Type": TYPES[extname(file)] || "application/octet-stream",
      "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Accept-Ranges": "bytes" };
    if (/\.bsors?$/.test(name)) {
      headers.ETag = `"${body.length.toString(16)}-1"`;
      headers["Cache-Control"] = "no-cache";
      if (req.headers["if-none-match"] || req.headers["if-modified-since"]) {
        conditional.push(name);
        res.writeHead(304, { ETag: headers.ETag });
        res.end();
        return;
      }
    }
    const r = /^bytes=(\d*)-(\d+)$/.exec(req.headers.range || "");
    if (r && (r[1] === "" || Number(r[1]) < body.length)) {
      let [a, b] = r[1] === "" ? [Math.max(0, body.length - Number(r[2])), body.length - 1]
        : [Number(r[1]), Math.min(Number(r[2]), body.length - 1)];
      if (name.startsWith("flaky-") && ++flakyCount % 3 === 0 && b > a) b = a + Math.floor((b - a) / 2);
      served.push([name, a, b]);
      res.writeHead(206, { ...headers, "Content-Range": `bytes ${a}-${b}/${body.length}` });
      res.end(body.subarray(a, b + 1));
      return;
    }
    served.push([name, 0, body.length - 1]);
    res.writeHead(200, headers);
    res.end(body);
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}

function startRelay(origin, archive = true) {
  writeFileSync(join(tmp, "token"), "secret\n");
  const child = spawn(bin, ["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0",
    "--token-file", join(tmp, "token"), ...(archive ? ["--archive", join(tmp, "archive")] : []),
    "--maps", mapsDir,
    ...(origin ? ["--allow-origin", origin] : [])],
  { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "warn,bsor_stream=debug" } });
  children.push(child);
  // The relay logs each range it serves (proto-spec/http.md): `served NAME bytes A-B`.
  let err = "";
  child.on("exit", (code, signal) => console.log(`browser: the relay exited (code ${code}, signal ${signal})`));
  child.stderr.on("data", (d) => {
    err += d;
    const lines = err.split("\n");
    err = lines.pop();
    for (const line of lines) {
      const m = /served (\S+) bytes (\d+)-(\d+)/.exec(line);
      if (m) relayServed.push([m[1].replace(/\.bsors$/, ""), Number(m[2]), Number(m[3])]);
    }
  });
  return new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = /listening tcp=(\S+) ws=(\S+)/.exec(out);
      if (m) ok({ tcp: m[1], ws: m[2] });
    });
    child.on("exit", (code) => fail(new Error(`serve exited with ${code}`)));
  });
}

function publish(tcp, session, file, speed) {
  const child = spawn(bin, ["publish", "--to", tcp, "--session", session, "--token-file",
    join(tmp, "token"), "--speed", String(speed), file], { stdio: "ignore" });
  children.push(child);
  return new Promise((ok) => child.on("exit", ok));
}

// ---- the browser ----
// A fresh profile in the temporary folder (playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(join(tmp, "profile"), {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 960, height: 600 },
  args: ["--headless", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
    "--disable-gpu-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});

async function newPage() {
  const page = await browser.newPage();
  page.errors = [];
  page.dialogs = 0;
  page.on("pageerror", (e) => page.errors.push(e.message));
  page.on("dialog", (d) => { page.dialogs++; d.dismiss(); });
  return page;
}

const status = (page) => page.evaluate(() => window.bsorStatus);

async function until(page, what, pred, seconds) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    const s = await status(page);
    if (s && pred(s)) return s;
    if (Date.now() > end) throw new Error(`${what}: not within ${seconds} s; status ${JSON.stringify(s)}`);
    await page.waitForTimeout(200);
  }
}

// Pixels of the WebGL canvas close to each saber's colour.
// The scene's pixels read back from the canvas (scaled to width x height, or at its own
// size): saber red, saber blue, and any other than the clear colour (0.035, 0.04, 0.07).
function saberPixels(page, width = 0, height = 0) {
  return page.evaluate(([width, height]) => {
    const src = document.getElementById("view");
    const c = document.createElement("canvas");
    c.width = width || src.width;
    c.height = height || src.height;
    const g = c.getContext("2d");
    g.drawImage(src, 0, 0, c.width, c.height);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let red = 0;
    let blue = 0;
    let drawn = 0;
    for (let i = 0; i < d.length; i += 4) {
      const [r, gr, b] = [d[i], d[i + 1], d[i + 2]];
      if (r > 120 && r > 2.5 * gr && r > 2.5 * b) red++;
      if (b > 120 && b > 1.6 * r && b > 1.3 * gr) blue++;
      if (Math.abs(r - 9) + Math.abs(gr - 10) + Math.abs(b - 18) > 24) drawn++;
    }
    return { red, blue, drawn };
  }, [width, height]);
}

// BSOR_TEST_ONLY=REGEX runs only the tests whose names match (a quicker loop).
const only = process.env.BSOR_TEST_ONLY ? new RegExp(process.env.BSOR_TEST_ONLY) : null;
async function test(name, body) {
  if (only && !only.test(name)) return;
  const page = await newPage();
  try {
    await body(page);
    assert.deepEqual(page.errors, [], "no script errors");
    passed++;
    console.log(`test browser::${name} ... ok`);
  } catch (e) {
    failed++;
    console.log(`test browser::${name} ... FAILED\n${e.stack}`);
  } finally {
    await page.screenshot({ path: join(shots, `${name}.png`) }).catch(() => {});
    await page.close();
  }
}

const statics = await serveStatic();
const staticBase = `http://127.0.0.1:${statics.address().port}/`;
// The page from the relay (same origin: its default Origin rule); the static server serves
// only the files a `?src=` test fetches from elsewhere.
const relay = await startRelay(null);
const base = `http://${relay.ws}/`;
const wsParam = "";
{
  const res = await fetch(base);
  assert.ok(res.ok && (res.headers.get("content-type") || "").startsWith("text/html"),
    `the relay serves the page at ${base}: ${res.status}`);
}

await test("live_session_ends_with_every_frame_and_the_final_score", async (page) => {
  await page.goto(`${base}?session=live1${wsParam}`);
  await until(page, "the page is ready", (s) => s.ready && s.mode === "live", 10);
  await page.waitForFunction(() => /waiting for/.test(document.getElementById("mode").textContent));
  const published = publish(relay.tcp, "live1", synth, 2);
  const s = await until(page, "the live session ends", (st) => st.ended, 60);
  assert.equal(await published, 0, "publish succeeded");
  assert.equal(s.framesDecoded, expectedFrames, "every frame");
  assert.equal(s.score, expectedScore, "the replay's final score");
  assert.equal(s.lastError, null);
  assert.ok(s.firstFrameTime !== null && s.framesRendered > 0);
  const px = await saberPixels(page);
  assert.ok(px.red > 20 && px.blue > 20, `both saber colours on screen: ${JSON.stringify(px)}`);
});

// A TCP proxy in front of the relay's WebSocket/HTTP address that can cut every connection
// through it, as a lost network would, and refuse new ones for a while after.
function proxyTo(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const open = new Set();
  let accepted = 0;
  let downUntil = 0;
  const server = createTcpServer((client) => {
    if (Date.now() < downUntil) {
      client.destroy();
      return;
    }
    accepted++;
    const upstream = tcpConnect(port, host);
    const pair = { client, upstream };
    open.add(pair);
    const close = () => { client.destroy(); upstream.destroy(); open.delete(pair); };
    client.on("error", close).on("close", close);
    upstream.on("error", close).on("close", close);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok({
    addr: `127.0.0.1:${server.address().port}`,
    accepted: () => accepted,
    cut: (ms = 0) => {
      downUntil = Date.now() + ms;
      for (const { client, upstream } of [...open]) { client.destroy(); upstream.destroy(); }
    },
    close: () => { server.close(); for (const { client, upstream } of [...open]) { client.destroy(); upstream.destroy(); } },
  })));
}

await test("a_dropped_connection_reconnects_and_resumes_to_the_end", async (page) => {
  const proxy = await proxyTo(relay.ws);
  try {
    // The page from the proxy, so its WebSocket (same origin) goes through it too.
    await page.goto(`http://${proxy.addr}/?session=recon`);
    await until(page, "the page is ready", (s) => s.ready && s.mode === "live", 10);
    await page.waitForFunction(() => /waiting for/.test(document.getElementById("mode").textContent));
    const published = publish(relay.tcp, "recon", synth, 2);
    const before = await until(page, "some frames", (st) => st.framesDecoded > 300, 30);
    const connections = proxy.accepted();
    // Down for 2 s: the relay has newer keyframe groups by the time the page is back.
    proxy.cut(2000);
    const cutAt = (await status(page)).framesDecoded;
    const s = await until(page, "the live session ends after the cut", (st) => st.ended, 60);
    assert.equal(await published, 0, "publish succeeded");
    assert.ok(proxy.accepted() > connections, "the page connected again");
    assert.ok(s.framesDecoded > cutAt, `frames after the cut: ${cutAt} -> ${s.framesDecoded}`);
    assert.ok(s.framesDecoded <= expectedFrames, `no frame twice: ${s.framesDecoded} of ${expectedFrames}`);
    assert.ok(before.framesDecoded <= cutAt);
    assert.equal(s.lastError, null);
    // A live viewer resumes at the newest keyframe group: it may skip the frames it missed,
    // but it reaches the song's end, and the events of the chunks it skipped come from the
    // relay's HTTP: the HUD at the end is the replay's own.
    assert.ok(s.songTime >= 19, `the end of the 20 s song: ${s.songTime}`);
    assert.ok((s.gaps.done ?? 0) >= 1 && !s.gaps.failed, `the gap filled: ${JSON.stringify(s.gaps)}`);
    const [want] = hudAt(synth, [s.songTime]);
    assert.deepEqual({ score: s.score, combo: s.combo, misses: s.misses },
      { score: want.score, combo: want.combo, misses: want.misses }, `the HUD at the end (${s.songTime} s)`);
  } finally {
    proxy.close();
  }
});

// Where the parts of a stored stream are, from the project's own decoder (the page's wasm).
function layout(file) {
  const { exports: w } = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(join(web, "bsor_stream.wasm"))), {});
  const b = readFileSync(file);
  const put = (bytes) => {
    const at = w.input_reserve(bytes.length); // may grow (and detach) the memory
    new Uint8Array(w.memory.buffer, at, bytes.length).set(bytes);
  };
  const out = () => JSON.parse(Buffer.from(new Uint8Array(w.memory.buffer, w.output_ptr(), w.output_len())).toString());
  put(b);
  assert.ok(w.seek_header() > 0);
  put(b.subarray(b.length - 16));
  assert.equal(w.seek_footer(), 0);
  const indexAt = out()[0].indexOffset;
  put(b.subarray(indexAt, b.length - 16));
  assert.equal(w.seek_index(), 0);
  const entries = out()[0].entries;
  const events = entries.filter((e) => e[0] === 3).map((e) => {
    put(b.subarray(e[1], e[1] + 64));
    return [e[1], e[1] + w.chunk_length()];
  });
  // Where the next indexed chunk starts after each event chunk (frame chunks are not indexed).
  const nextIndexed = entries.flatMap((e, k) => (e[0] === 3 ? [k + 1 < entries.length ? entries[k + 1][1] : indexAt] : []));
  const keys = entries.filter((e) => e[0] === 1);
  const groups = keys.map((e, i) => ({ t0: e[4], from: e[1], to: i + 1 < keys.length ? keys[i + 1][1] : entries.find((x) => x[0] === 4)[1] }));
  return { size: b.length, indexAt, events, nextIndexed, groups };
}

await test("stored_replay_seeks_reading_only_what_it_needs", async (page) => {
  const name = basename(archived);
  const l = layout(archived);
  assert.ok(l.groups.length >= 2, "the archived stream has two groups");
  const g = l.groups[l.groups.length - 1];
  const t = Math.ceil(g.t0) + 1;
  served.length = 0;
  await page.goto(`${staticBase}?src=${name}&t=${t}`);
  const s = await until(page, "the replay shows the moment", (st) => st.framesRendered > 3, 20);
  assert.ok(s.songTime >= t, `starts at &t=${t}: ${s.songTime}`);
  assert.equal(s.mode, "replay");
  const allowed = [[0, 511], [l.size - 16, l.size - 1], [l.indexAt, l.size - 17],
    ...l.events.map(([a, b]) => [a, b - 1]), [g.from, g.to - 1]];
  const reads = served.filter(([n]) => n === name);
  if (process.env.BROWSER_TEST_DEBUG) console.log(JSON.stringify({ reads, l }));
  for (const [, a, b] of reads) {
    assert.ok(allowed.some(([x, y]) => a >= x && b <= y),
      `bytes ${a}-${b} are the header, footer, index, an event chunk or the group at ${t} s`);
  }
  assert.ok(reads.some(([, a, b]) => a === g.from && b === g.to - 1), "the group was read");
  assert.ok(s.framesDecoded > 0 && s.framesDecoded < expectedFrames, `one group's frames: ${s.framesDecoded}`);
  const end = await until(page, "the replay ends", (st) => st.ended, 30);
  assert.equal(end.score, expectedScore, "the final score, from the event chunks");
});

await test("archived_session_from_the_relay_seeks_by_ranges", async (page) => {
  const l = layout(join(tmp, "archive", "live1.bsors"));
  // The header read, the footer, the index, and the event chunks: stretches of the file from
  // the start of one to the end of another (in at most 8 reads).
  const known = [[0, 511], [l.size - 16, l.size - 1], [l.indexAt, l.size - 17]];
  const starts = new Set(l.events.map(([a]) => a));
  const ends = new Set(l.nextIndexed.map((b) => b - 1));
  const groupOf = ([, a, b]) => l.groups.findIndex((x) => a >= x.from && b < x.to);
  let eventReads = 0;
  relayServed.length = 0;
  await page.goto(`${base}?replay=live1`);
  await until(page, "the replay starts", (st) => st.framesRendered > 0, 20);
  await page.keyboard.press("Space"); // pause: no group is read ahead
  // Until the event chunks are in: no new reads for 600 ms.
  for (let n = -1; n !== relayServed.length;) {
    n = relayServed.length;
    await page.waitForTimeout(600);
  }
  const before = relayServed.filter(([n]) => n === "live1");
  for (const r of before) {
    const events = starts.has(r[1]) && ends.has(r[2]);
    if (events) eventReads++;
    assert.ok(known.some(([x, y]) => r[1] >= x && r[2] <= y) || groupOf(r) >= 0 || events,
      `bytes ${r[1]}-${r[2]} are the header, footer, index, event chunks or a group`);
  }
  assert.ok(eventReads >= 1 && eventReads <= 8, `the event chunks in 1 to 8 reads: ${eventReads}`);
  // Seek, paused, to the middle: exactly one keyframe group is read, nothing else.
  const g = l.groups[Math.floor(l.groups.length / 2)];
  const t = g.t0 + 0.2;
  relayServed.length = 0;
  await page.$eval("#timeline", (el, v) => { el.value = String(v); el.dispatchEvent(new Event("input")); }, t);
  const s = await until(page, "the seek shows the moment", (st) => Math.abs(st.songTime - t) < 0.05 && st.framesDecoded > 0, 10);
  await page.waitForTimeout(300);
  const after = relayServed.filter(([n]) => n === "live1");
  // (The relay may log one response as several stretches.)
  assert.ok(after.length > 0 && after.every(([, a, b]) => a >= g.from && b <= g.to - 1),
    `one keyframe group (bytes ${g.from}-${g.to - 1}), and only it: ${JSON.stringify(after)}`);
  assert.equal(Math.min(...after.map((r) => r[1])), g.from);
  assert.equal(Math.max(...after.map((r) => r[2])), g.to - 1);
  assert.equal(s.lastError, null);
});

await test("late_joiner_starts_at_the_newest_keyframe_group_and_lists_show_text", async (page) => {
  const published = publish(relay.tcp, "late", join(tmp, "hostile.bsor"), 2);
  // Join once the relay has 6 s of song (its own account, /sessions), not by a clock.
  let joinedAt = 0;
  for (let i = 0; i < 100 && joinedAt < 6; i++) {
    await page.waitForTimeout(100);
    const list = await (await fetch(`${base}sessions`)).json();
    joinedAt = list.sessions.find((x) => x.name === "late")?.duration ?? 0;
  }
  assert.ok(joinedAt >= 6, "the session got going");
  await page.goto(`${base}?session=late`);
  const shown = await until(page, "the first frame", (st) => st.framesRendered > 0 && st.afterSeek, 20);
  const first = Number(await page.getAttribute("#timeline", "min"));
  assert.equal(await page.textContent("#player"), HOSTILE);
  // The events before the join point came from the relay (http.md 4.1): the HUD of the
  // first frame is the replay's own at that time, not a count from the join point.
  assert.equal(shown.backlog, "done");
  assert.ok(shown.afterSeek.songTime > 5, `joined late: ${shown.afterSeek.songTime}`);
  assertHud(shown.afterSeek, synth, "a late joiner's first frame");
  assert.doesNotMatch(await page.textContent("#mode"), /counts from there/);
  const end = await until(page, "the end", (st) => st.ended, 40);
  assert.equal(end.score, expectedScore, "a late joiner's final score");
  assert.equal(await published, 0);
  const l = layout(join(tmp, "archive", "late.bsors"));
  const starts = l.groups.map((g) => g.t0);
  assert.ok(starts.some((t0) => Math.abs(t0 - first) < 1e-4), `first frame ${first} starts a keyframe group`);
  const newest = Math.max(...starts.filter((t0) => t0 <= joinedAt));
  assert.ok(first >= newest, `first frame ${first} is from the newest group when joining (${newest}) or later`);

  // The session list shows the hostile name as text, in a link-free cell.
  await page.goto(base);
  await page.waitForSelector("#sessions tr");
  assert.ok(await page.isHidden("#controls"), "no player controls on the session list");
  const cells = await page.$$eval("#sessions td", (tds) => tds.map((td) => td.textContent));
  assert.ok(cells.includes(HOSTILE), "the player's name, as text");
  assert.equal(await page.locator("#sessions img").count(), 0);
  assert.equal(page.dialogs, 0);
});

await test("hostile_player_name_renders_as_text", async (page) => {
  await page.goto(`${base}${wsParam ? `?${wsParam.slice(1)}` : ""}`);
  await until(page, "the list", (s) => s.ready, 10);
  await page.setInputFiles("#file", join(tmp, "hostile.bsor"));
  await until(page, "the file plays", (s) => s.mode === "file" && s.framesRendered > 0, 20);
  assert.equal(await page.textContent("#player"), HOSTILE);
  assert.equal(await page.locator("#hud img").count(), 0, "no element made from the name");
  assert.equal(page.dialogs, 0, "no script ran");
});

await test("damaged_stream_shows_its_error", async (page) => {
  await page.goto(`${base}${wsParam ? `?${wsParam.slice(1)}` : ""}`);
  await until(page, "the list", (s) => s.ready, 10);
  await page.setInputFiles("#file", join(tmp, "damaged.bsors"));
  const s = await until(page, "the error", (st) => st.lastError !== null, 20);
  assert.match(s.lastError, /cannot decode: .*header/i);
  assert.ok(await page.isVisible("#error"));
  assert.equal(await page.textContent("#error"), s.lastError);
});

await test("local_bsor_plays", async (page) => {
  await page.goto(`${base}${wsParam ? `?${wsParam.slice(1)}` : ""}`);
  await until(page, "the list", (s) => s.ready, 10);
  await page.setInputFiles("#file", synth);
  const s = await until(page, "the file plays", (st) => st.framesRendered > 10 && st.songTime > 0.3, 20);
  assert.equal(s.framesDecoded, expectedFrames);
  assert.equal(s.lastError, null);
  assert.ok(await page.isHidden("#list"));
  // The first frame is drawn without multisampling (its buffers would delay it), the next
  // ones into a multisampled framebuffer resolved into the canvas: edges stay smooth, the
  // resolve raises no GL error (a blit between unlike formats would), and the scene is on
  // the canvas (more than its clear colour).
  const later = await until(page, "multisampled frames", (st) => st.framesRendered > 30 && st.glError !== null, 20);
  assert.ok(later.samples >= 2, `frames after the first drawn with ${later.samples} samples a pixel`);
  assert.equal(later.glError, 0, "GL error after the first multisampled frame");
  const { drawn } = await saberPixels(page, 96, 60);
  assert.ok(drawn > 200, `${drawn} of 5,760 pixels differ from the clear colour`);
});

// web/pace.js, by its times: a steady display keeps the full rate; one that misses 1 frame
// in 8 gets the half rate after the warm-up and one window, tries the full rate again 10 s
// later, falls back, and next tries after 20 s; a fixed rate never changes.
await test("frame_pacing_halves_the_rate_when_frames_miss_the_display", async (page) => {
  await page.goto(`${base}${wsParam ? `?${wsParam.slice(1)}` : ""}`);
  await until(page, "the list", (s) => s.ready, 10);
  const r = await page.evaluate(async () => {
    const { Pacer } = await import("./pace.js");
    const run = (p, times) => times.flatMap((t) => (p.frame(t) ? [[t, p.half]] : []));
    const times = (n, late) => {
      let t = 0;
      return Array.from({ length: n }, (_, i) => (t += ((late && i % 8 === 7) ? 2 : 1) * (1000 / 60) + ((i * 7919) % 5 - 2) * 0.3));
    };
    const slow = times(2400, true);
    const fixed = (mode) => { const p = new Pacer(mode); return { changes: run(p, slow), half: p.half }; };
    const first = new Pacer();
    run(first, slow.slice(0, 179));
    const before = first.half;
    first.frame(slow[179]);
    return { steady: run(new Pacer(), times(2400, false)), slow: run(new Pacer(), slow), full: fixed("full"),
      half: fixed("half"), before, after: first.half };
  });
  assert.deepEqual(r.steady, [], "a display that keeps its rate keeps the full rate");
  assert.deepEqual([r.before, r.after], [false, true], "half rate at the end of the first counted window");
  assert.deepEqual(r.slow.map(([, half]) => half), [true, false, true, false, true]);
  const gaps = r.slow.slice(1).map(([t], i) => t - r.slow[i][0]);
  assert.ok(gaps[0] >= 10000 && gaps[0] < 10050, `retried after 10 s: ${gaps[0]}`);
  assert.ok(gaps[2] >= 20000 && gaps[2] < 20050, `then after 20 s: ${gaps[2]}`);
  assert.deepEqual(r.full, { changes: [], half: false });
  assert.deepEqual(r.half, { changes: [], half: true });
});

await test("late_joiner_without_the_past_says_so_to_the_end", async (page) => {
  // A relay with no archive cannot give the events before the join point.
  const bare = await startRelay(null, false);
  const published = publish(bare.tcp, "bare", synth, 2);
  let joinedAt = 0;
  for (let i = 0; i < 100 && joinedAt < 6; i++) {
    await page.waitForTimeout(100);
    const list = await (await fetch(`http://${bare.ws}/sessions`)).json();
    joinedAt = list.sessions.find((x) => x.name === "bare")?.duration ?? 0;
  }
  await page.goto(`http://${bare.ws}/?session=bare`);
  await until(page, "the first frame", (st) => st.framesRendered > 0, 20);
  await until(page, "the end", (st) => st.ended, 40);
  assert.equal(await published, 0);
  await page.waitForTimeout(300);
  assert.equal((await status(page)).backlog, "failed");
  assert.match(await page.textContent("#mode"), /ended.*joined at .*the score counts from there/);
});

// ---- long, dense stored replays, by URL ----

// Seeks (paused or not) by the timeline as a user does; the first frame shown after it.
async function seekTo(page, t) {
  const before = (await status(page)).afterSeek?.frame ?? -1;
  await page.$eval("#timeline", (el, v) => { el.value = String(v); el.dispatchEvent(new Event("input")); }, t);
  const s = await until(page, `the first frame after a seek to ${t}`, (st) => st.afterSeek && st.afterSeek.frame > before, 20);
  return s.afterSeek;
}

// Seeks to the end (the timeline's end grows once the last group is in: the index does not
// give the time of a group's last frame).
async function seekToEnd(page) {
  let shown = null;
  for (let i = 0; i < 3; i++) {
    const max = Number(await page.getAttribute("#timeline", "max"));
    if (shown && shown.songTime >= max) break;
    shown = await seekTo(page, max);
    await page.waitForTimeout(200);
  }
  return shown;
}

// The HUD of a frame shown equals the library's account of the replay at its song time.
function assertHud(shown, file, what) {
  const [want] = hudAt(file, [shown.songTime]);
  assert.deepEqual({ score: shown.score, combo: shown.combo, misses: shown.misses },
    { score: want.score, combo: want.combo, misses: want.misses }, `${what}: the HUD at ${shown.songTime} s`);
  assert.equal(shown.shownScore, String(want.score), `${what}: the score on screen`);
}

// Requests that failed in the browser (the worker's included); not those aborted because
// the test navigated away while they were in flight (net::ERR_ABORTED).
function failures(page) {
  const failed = [];
  const seen = (r) => {
    if (r.failure()?.errorText !== "net::ERR_ABORTED") failed.push(`${r.url()}: ${r.failure()?.errorText}`);
  };
  browser.on("requestfailed", seen);
  page.on("close", () => browser.off("requestfailed", seen));
  return failed;
}

await test("dense_stored_replay_opens_in_at_most_16_requests_with_every_note", async (page) => {
  assert.ok(denseNotes >= 2900, `a dense replay: ${denseNotes} notes`);
  const failed = failures(page);
  served.length = 0;
  await page.goto(`${staticBase}?src=dense.bsors`);
  await until(page, "the first frame", (st) => st.framesRendered > 0 || st.lastError, 30);
  await page.keyboard.press("Space");
  // Until the page reads no more: no new request for 600 ms.
  for (let n = -1; n !== served.length;) {
    n = served.length;
    await page.waitForTimeout(600);
  }
  const reads = served.filter(([n]) => n === "dense.bsors");
  if (process.env.BROWSER_TEST_DEBUG) console.log(`dense.bsors: ${reads.length} requests`);
  assert.ok(reads.length <= 16, `at most 16 requests to open it: ${reads.length}`);
  const s = await until(page, "every event is in", (st) => st.eventsTo === "all" && st.afterSeek, 30);
  assert.ok(s.reads <= 16 && s.reads > 0, `the page's own count: ${s.reads}`);
  assert.equal(s.lastError, null);
  assertHud(s.afterSeek, dense, "the first frame");
  const end = await seekToEnd(page);
  assert.equal(end.score, denseScore, "the replay's final score");
  assert.deepEqual(failed, []);
});

await test("dense_archived_replay_from_the_relay_shows_the_hud_from_its_first_frame", async (page) => {
  mkdirSync(join(tmp, "archive"), { recursive: true });
  writeFileSync(join(tmp, "archive", "dense.bsors"), readFileSync(join(tmp, "dense.bsors")));
  const failed = failures(page);
  await page.goto(`${base}?replay=dense&t=60`);
  const s = await until(page, "the first frame", (st) => st.afterSeek, 30);
  assert.ok(s.afterSeek.songTime >= 60 && s.afterSeek.songTime < 60.5, `starts at 60 s: ${s.afterSeek.songTime}`);
  assert.ok(s.afterSeek.score > 0, "the score of 60 s of play");
  assertHud(s.afterSeek, dense, "the first frame at &t=60");
  const all = await until(page, "every event is in", (st) => st.eventsTo === "all", 30);
  assert.ok(all.reads <= 16, `at most 16 requests: ${all.reads}`);
  await page.keyboard.press("Space");
  for (const t of [200.5, 10.25]) assertHud(await seekTo(page, t), dense, `a seek to ${t}`);
  assert.equal((await status(page)).lastError, null);
  assert.deepEqual(failed, []);
});

await test("short_answers_are_read_again_never_reported_as_damage", async (page) => {
  served.length = 0;
  flakyCount = 0;
  await page.goto(`${staticBase}?src=flaky-dense.bsors&t=30`);
  const s = await until(page, "every event is in", (st) => (st.eventsTo === "all" && st.afterSeek) || st.lastError, 60);
  assert.equal(s.lastError, null);
  assert.ok(flakyCount >= 3, `short answers were served: ${flakyCount} ranges`);
  assertHud(s.afterSeek, dense, "the first frame at &t=30");
  await page.keyboard.press("Space");
  assert.equal((await seekToEnd(page)).score, denseScore, "the final score: no event lost");
});

await test("repeated_loads_are_not_answered_from_the_cache", async (page) => {
  conditional.length = 0;
  for (let i = 0; i < 3; i++) {
    await page.goto(`${staticBase}?src=dense.bsors&t=60`);
    const s = await until(page, `load ${i + 1}`, (st) => (st.eventsTo === "all" && st.afterSeek) || st.lastError, 30);
    assert.equal(s.lastError, null, `load ${i + 1}`);
    assertHud(s.afterSeek, dense, `load ${i + 1}`);
  }
  assert.deepEqual(conditional, [], "no request with a cache condition");
});

await test("a_stream_cut_short_plays_as_far_as_it_goes", async (page) => {
  writeFileSync(join(tmp, "archive", "cut.bsors"), readFileSync(join(tmp, "cut.bsors")));
  for (const url of [`${base}?replay=cut`, `${staticBase}?src=cut.bsors&t=20`]) {
    await page.goto(url);
    const s = await until(page, `${url} plays`, (st) => (st.framesRendered > 5 && st.afterSeek) || st.lastError, 20);
    assert.equal(s.lastError, null, url);
    // It says so, in a banner below the play space (notes arrive in its middle).
    assert.match(await page.textContent("#banner"), /cut short/);
    const rect = (sel) => page.$eval(sel, (e) => e.getBoundingClientRect().toJSON());
    const [banner, stage] = [await rect("#banner"), await rect("#stage")];
    assert.ok(banner.top > stage.top + stage.height * 0.7, `the banner is low: ${JSON.stringify(banner)}`);
    assert.ok(s.framesDecoded > 1000 && s.framesDecoded < 27000, `${url}: the frames there are: ${s.framesDecoded}`);
    assertHud(s.afterSeek, dense, url);
  }
});

await test("a_header_alone_or_a_data_url_says_why_nothing_plays", async (page) => {
  const b = readFileSync(join(tmp, "dense.bsors"));
  // The header alone: the layout's first chunk starts where it ends.
  const { exports: w } = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(join(web, "bsor_stream.wasm"))), {});
  const at = w.input_reserve(b.length);
  new Uint8Array(w.memory.buffer, at, b.length).set(b);
  const hlen = w.seek_header();
  assert.ok(hlen > 0);
  writeFileSync(join(tmp, "archive", "headonly.bsors"), b.subarray(0, hlen));
  for (const [url, why] of [[`${base}?replay=headonly`, /no frames/],
    [`${base}?src=${encodeURIComponent("data:application/octet-stream;base64,QlNSUw==")}`, /could not read|refused/]]) {
    await page.goto(url);
    const s = await until(page, `${url}: a message`, (st) => st.lastError !== null, 20);
    assert.match(s.lastError, why, url);
    assert.ok(await page.isVisible("#error"), url);
  }
});

// ---- maps and music ----

// What the formats and the game's rules put in view at song time t, computed here from the
// fixture's objects (web/README.md, "Maps and music"), not by the page: {objects, walls,
// arcs} in the game's coordinates.
const ROWS = [0.85, 1.4, 1.9];
const SHIFT = Math.min(0.6, Math.max(-0.2, (1.7 - 1.8) * 0.5)); // the replay's height, 1.7 m
const rowAt = (l) => {
  const k = Math.floor(l);
  const f = l - k;
  return f === 0 ? ROWS[k] : ROWS[k] + (ROWS[k + 1] - ROWS[k]) * f;
};
function halfJumpOf(v) {
  if (mapsMade[v].jd) return mapsMade[v].jd / (2 * fx.NJS);
  const beat = 60 / fx.BPM;
  let h = 4;
  while (fx.NJS * beat * h > 18) h /= 2;
  h += fx.OFFSET;
  return Math.max(0.25, h) * beat;
}
// The NJS and half-jump duration at song time t: the map's, or for v4 with its NJS events
// (web/README.md): the NJS offset of the last event at or before t (an event with p: the
// last one's before it without; none: 0), moving towards the next event's (unless that one
// has p) by its easing of the fraction of the way from the last event's time (0 if none) to
// the next's; a slower NJS lengthens the half jump by base NJS / NJS, a faster one keeps it.
function jumpOf(v, t) {
  const base = halfJumpOf(v);
  if (v !== 4) return { njs: fx.NJS, half: base };
  const ev = fx.NJS_EVENTS.map((e) => ({ ...e, t: fx.seconds(e.b) }));
  const before = ev.filter((e) => e.t <= t);
  const last = before[before.length - 1];
  const next = ev.find((e) => e.t > t);
  const held = (e) => (e.p ? (ev.filter((x) => x.t < e.t && !x.p).pop()?.d ?? 0) : e.d);
  let d = last ? held(last) : 0;
  if (next && !next.p) {
    const t0 = last ? last.t : 0;
    const f = (t - t0) / (next.t - t0);
    const eased = { [-1]: f >= 1 ? 1 : 0, 0: f, 1: f * f, 2: 1 - (1 - f) ** 2, 3: f < 0.5 ? 2 * f * f : 1 - 2 * (1 - f) ** 2 }[next.e];
    d += (next.d - d) * eased;
  }
  const njs = fx.NJS + d;
  return { njs, half: njs < fx.NJS ? base * (fx.NJS / njs) : base };
}
// An object's lane rotation (degrees, clockwise seen from above) for the replay's
// characteristic: v2's and v4's (90Degree) the fixture's rotations at its beat, v3's
// (Standard) none; and a point turned with it about the vertical axis through the player.
const laneRotation = (v, beat) => (v === 3 ? 0 : fx.rotationAt(beat));
function turned(p, deg) {
  const a = (deg * Math.PI) / 180;
  return [p[0] * Math.cos(a) + p[2] * Math.sin(a), p[1], p[2] * Math.cos(a) - p[0] * Math.sin(a)];
}
function expectedView(v, t) {
  const { njs, half } = jumpOf(v, t);
  const reach = half * njs;
  const events = fx.replayEvents();
  const hitTime = (kind, time, x, y) => {
    const e = events.find((e) => Math.abs(e.spawn - time) < 0.001 && e.x === Math.round(x) && e.y === Math.round(y) &&
      (kind === "bomb") === (e.type === 3));
    return e && e.type !== 2 ? e.t : Infinity;
  };
  const objects = [];
  // The jump: each rises on a parabola in time from the line it jumps from (0.25 m, and 0.6 m
  // higher for each row under it taken by a note or bomb at its time in its lane; a chain
  // link from 0.25 m) to its row at its time, falling again after:
  // y = row − (row − from) · ((its time − t) / half jump)².
  const notesAndBombs = [...fx.NOTES, ...fx.BOMBS];
  const from = (b, x, y) => 0.25 + 0.6 * new Set(notesAndBombs.filter((o) => o.b === b && o.x === x && o.y < y).map((o) => o.y)).size;
  const jumpY = (row, y0, time) => row - (row - y0) * ((time - t) / half) ** 2;
  // A chain link's place in metres (`mx`, `my`) is given; others' from their lane and row;
  // then turned with its lane (a chain's links with its head).
  const add = (kind, beat, time, x, y, y0, mx, my) => {
    const z = (time - t) * njs;
    if (time > t + half || t >= hitTime(kind, time, x, y) || z < -reach || z > reach) return;
    const rot = laneRotation(v, beat);
    const p = [mx ?? (x - 1.5) * 0.6, jumpY((my ?? rowAt(y)) + SHIFT, y0, time), z];
    // A crossed note (of a red and a blue alone at their beat, the red's lane right of the
    // blue's, neither an arc's end nor a chain's head) comes from the other's lane: in the
    // first quarter of its jump (q, the fraction gone of 2 half jumps) x moves over, eased
    // in-out quadratically (4q), with a hop of h · (1 − cos 8πq)/2, h 0.45 m for the higher
    // note (the red on a tie) and −0.15 m for the other.
    const pair = kind === "note" ? fx.NOTES.filter((n) => n.b === beat) : [];
    const red = pair.find((n) => n.c === 0);
    const blue = pair.find((n) => n.c === 1);
    const attached = (n) => fx.ARCS.some((a) => (a.b === n.b && a.x === n.x && a.y === n.y) || (a.tb === n.b && a.tx === n.x && a.ty === n.y)) ||
      (v !== 2 && fx.CHAINS.some((c) => c.b === n.b && c.x === n.x && c.y === n.y));
    if (pair.length === 2 && red && blue && red.x > blue.x && !pair.some(attached)) {
      const me = pair.find((n) => n.x === x && n.y === y);
      const other = pair.find((n) => n !== me);
      const over = (me.c === 0) === !(red.y < blue.y);
      const q = (t - (time - half)) / (2 * half);
      const x0 = (other.x - 1.5) * 0.6;
      if (q <= 0) p[0] = x0;
      else if (q < 0.25) {
        const f = 4 * q;
        p[0] = x0 + (p[0] - x0) * (f < 0.5 ? 2 * f * f : 1 - 2 * (1 - f) ** 2);
        p[1] += (over ? 0.45 : -0.15) * (1 - Math.cos(8 * Math.PI * q)) / 2;
        figures.swapping++;
      }
    }
    const w = turned(p, rot);
    objects.push({ kind, time, rot, x: w[0], y: w[1], z: w[2] });
  };
  for (const n of fx.NOTES) add("note", n.b, fx.seconds(n.b), n.x, n.y, from(n.b, n.x, n.y));
  for (const n of fx.BOMBS) add("bomb", n.b, fx.seconds(n.b), n.x, n.y, from(n.b, n.x, n.y));
  if (v !== 2) for (const c of fx.CHAINS) for (const l of fx.chainLinks(c)) add("link", c.b, l.t, l.x, l.y, 0.25, l.mx, l.my);
  const walls = [];
  for (const w of fx.WALLS) {
    const t0 = fx.seconds(w.b);
    const t1 = fx.seconds(w.b + w.d);
    if (t0 > t + half || (t1 - t) * njs < -reach) continue;
    walls.push({ time: t0, rot: laneRotation(v, w.b), x0: (w.x - 2) * 0.6, x1: (w.x - 2 + w.w) * 0.6, y0: w.y * 0.6, y1: (w.y + w.h) * 0.6,
      z0: (t0 - t) * njs, z1: (t1 - t) * njs });
  }
  const arcs = [];
  for (const a of fx.ARCS) {
    const t0 = fx.seconds(a.b);
    const t1 = fx.seconds(a.tb);
    if (t0 > t + half || (t1 - t) * njs < -reach) continue;
    // An end on a note or bomb follows its jump (offset o = its jump height − its row); a
    // bead dz deep past the head moves by o_head·(1 − min(1, dz/R))² and
    // o_tail·(1 − min(1, (L − dz)/R))² mixed by dz/L (R the half jump distance).
    const on = (b, x, y) => [...fx.NOTES, ...fx.BOMBS].some((o) => o.b === b && o.x === x && o.y === y);
    // (Out of its jump's window, a note is where it jumps from.)
    const off = (b, time, x, y) => {
      if (!on(b, x, y)) return 0;
      const row = rowAt(y) + SHIFT;
      return -(row - from(b, x, y)) * Math.min(1, Math.abs(time - t) / half) ** 2;
    };
    const oh = off(a.b, t0, a.x, a.y);
    const ot = off(a.tb, t1, a.tx, a.ty);
    const L = (t1 - t0) * njs;
    const R = reach;
    const c = (x) => Math.min(1, Math.max(0, x));
    const lift = (z) => {
      const dz = z - (t0 - t) * njs;
      const h = oh * (1 - c(dz / R)) ** 2;
      const tl = ot * (1 - c((L - dz) / R)) ** 2;
      return h + (tl - h) * (L > 0 ? c(dz / L) : 0);
    };
    arcs.push({ time: t0, rot: laneRotation(v, a.b), lift, ...arcCurve(a, t0, t1, t, njs) });
  }
  return { objects, walls, arcs };
}

// An arc's curve at song time t (ArcViewer's Arc and ArcManager; ChroMapper's ArcContainer
// for the game's 2.5 m): its ends at their notes' places at rest, moved half a note (0.225 m)
// along their cut directions when a note or bomb is there (the tail against its direction);
// cubic Bézier control points 2.5 m · multiplier from the ends along the head's direction and
// against the tail's, each at its end's z. With a mid anchor (1 clockwise, 2 counter-
// clockwise; only for an arc in one lane whose ends' directions lie on one line) two cubics
// meeting at the ends' midpoint moved 2.5 m at right angles to the head's direction (rotated
// -90° for clockwise, +90° otherwise, angles with 0° pointing down), their inner control
// points that midpoint ± (±0.25·(|p1−m|+|p2−m|) in x and y, the sign + when p1 ≥ p2, 0 when
// p1 and p2 agree; −0.15·(|p1−m|+|p2−m|) in z). {head, tail, segments}.
const ANGLE = { 0: 180, 1: 0, 2: -90, 3: 90, 4: -135, 5: 135, 6: -45, 7: 45, 8: 0 };
const unit = (deg) => [Math.sin((deg * Math.PI) / 180), -Math.cos((deg * Math.PI) / 180)];
function arcCurve(a, t0, t1, t, njs) {
  const on = (b, x, y) => [...fx.NOTES, ...fx.BOMBS].some((o) => o.b === b && o.x === x && o.y === y);
  const hd = a.d === 8 ? [0, 0] : unit(ANGLE[a.d]);
  const td = a.td === 8 ? [0, 0] : unit(ANGLE[a.td]);
  const ha = on(a.b, a.x, a.y) ? 0.225 : 0;
  const ta = on(a.tb, a.tx, a.ty) ? 0.225 : 0;
  const p0 = [(a.x - 1.5) * 0.6 + hd[0] * ha, rowAt(a.y) + SHIFT + hd[1] * ha, (t0 - t) * njs];
  const p3 = [(a.tx - 1.5) * 0.6 - td[0] * ta, rowAt(a.ty) + SHIFT - td[1] * ta, (t1 - t) * njs];
  const p1 = [p0[0] + hd[0] * a.mu * 2.5, p0[1] + hd[1] * a.mu * 2.5, p0[2]];
  const p2 = [p3[0] - td[0] * a.tmu * 2.5, p3[1] - td[1] * a.tmu * 2.5, p3[2]];
  const onePlane = Math.abs(ANGLE[a.d] - ANGLE[a.td]) === 0 || Math.abs(ANGLE[a.d] - ANGLE[a.td]) === 180;
  if (!(a.m === 1 || a.m === 2) || a.x !== a.tx || !onePlane) return { head: p0, tail: p3, segments: [[p0, p1, p2, p3]] };
  const o = a.d === 8 ? [0, 0] : unit(ANGLE[a.d] + (a.m === 1 ? -90 : 90));
  const m = [(p0[0] + p3[0]) / 2 + o[0] * 2.5, (p0[1] + p3[1]) / 2 + o[1] * 2.5, (p0[2] + p3[2]) / 2];
  const c = [0, 1, 2].map((k) => {
    const d = Math.abs(p1[k] - m[k]) + Math.abs(p2[k] - m[k]);
    if (k === 2) return -0.15 * d;
    if (near(p1[k], p2[k], 1e-6)) return 0;
    return (p1[k] < p2[k] ? -1 : 1) * 0.25 * d;
  });
  return { head: p0, tail: p3, segments: [[p0, p1, m.map((v, k) => v + c[k]), m], [m, m.map((v, k) => v - c[k]), p2, p3]] };
}
const cubic = (s, u) => [0, 1, 2].map((k) => (1 - u) ** 3 * s[0][k] + 3 * (1 - u) ** 2 * u * s[1][k] + 3 * (1 - u) * u * u * s[2][k] + u ** 3 * s[3][k]);
// The curve's point at depth z (each segment's z rises with its parameter: bisection).
function arcPointAtZ(segments, z) {
  for (const s of segments) {
    if (z < Math.min(s[0][2], s[3][2]) - 1e-6 || z > Math.max(s[0][2], s[3][2]) + 1e-6) continue;
    let lo = 0;
    let hi = 1;
    for (let i = 0; i < 60; i++) {
      const mid = (lo + hi) / 2;
      if (cubic(s, mid)[2] < z) lo = mid;
      else hi = mid;
    }
    return cubic(s, (lo + hi) / 2);
  }
  return null;
}

const near = (a, b, tol) => Math.abs(a - b) <= tol;
// The page's view at its song time against the formulas: every object, wall and arc, its
// time within 1 ms and its place within 1 cm.
function assertView(v, shown) {
  const t = shown.t;
  const want = expectedView(v, t);
  const what = `v${v} at ${t.toFixed(3)} s`;
  const key = (o) => `${o.kind}@${o.time.toFixed(3)}`;
  assert.deepEqual(shown.objects.map(key).sort(), want.objects.map(key).sort(), `${what}: the objects in view`);
  for (const w of want.objects) {
    const o = shown.objects.find((o) => o.kind === w.kind && near(o.time, w.time, 0.001) && near(o.x, w.x, 0.01) && near(o.y, w.y, 0.01));
    assert.ok(o, `${what}: ${key(w)} at x ${w.x.toFixed(3)} y ${w.y.toFixed(3)}: ${JSON.stringify(shown.objects)}`);
    assert.ok(near(o.z, w.z, 0.01), `${what}: ${key(w)} z ${o.z} (want ${w.z})`);
    assert.ok(near(o.rot, w.rot, 1e-9), `${what}: ${key(w)} turned ${o.rot}° (want ${w.rot}°)`);
    if (w.rot) figures.turned++;
    figures.objects++;
    figures.objectError = Math.max(figures.objectError, Math.hypot(o.x - w.x, o.y - w.y, o.z - w.z));
  }
  assert.equal(shown.walls.length, want.walls.length, `${what}: walls in view`);
  for (const w of want.walls) {
    const o = shown.walls.find((o) => near(o.time, w.time, 0.001));
    assert.ok(o, `${what}: the wall at ${w.time}`);
    for (const k of ["x0", "x1", "y0", "y1", "z0", "z1"]) assert.ok(near(o[k], w[k], 0.01), `${what}: wall ${w.time} ${k} ${o[k]} (want ${w[k]})`);
    assert.ok(near(o.rot, w.rot, 1e-9), `${what}: wall ${w.time} turned ${o.rot}° (want ${w.rot}°)`);
  }
  assert.equal(shown.arcs.length, want.arcs.length, `${what}: arcs in view`);
  for (const w of want.arcs) {
    const o = shown.arcs.find((o) => near(o.time, w.time, 0.001));
    assert.ok(o, `${what}: the arc at ${w.time}`);
    // The arc turned with its head's lane: its ends where they are, its beads brought back
    // into the lane's frame (turned back by the rotation the test expects).
    assert.ok(near(o.rot, w.rot, 1e-9), `${what}: arc ${w.time} turned ${o.rot}° (want ${w.rot}°)`);
    const head = turned([w.head[0], w.head[1] + w.lift(w.head[2]), w.head[2]], w.rot);
    const tail = turned([w.tail[0], w.tail[1] + w.lift(w.tail[2]), w.tail[2]], w.rot);
    for (let i = 0; i < 3; i++) {
      assert.ok(near(o.head[i], head[i], 0.01) && near(o.tail[i], tail[i], 0.01), `${what}: arc ${JSON.stringify(o)} (want ${JSON.stringify(w)})`);
    }
    o.beads = o.beads.map((b) => turned(b, -w.rot));
    // Every bead on the curve: at its depth, within 1 cm in x and y; and the beads in view
    // spread along it (at least 8, or all of those within reach).
    const { njs, half } = jumpOf(v, t);
    const reach = half * njs;
    for (const b of o.beads) {
      const p = arcPointAtZ(w.segments, b[2]);
      if (p) p[1] += w.lift(b[2]);
      assert.ok(p && near(p[0], b[0], 0.01) && near(p[1], b[1], 0.01),
        `${what}: arc ${w.time} bead ${JSON.stringify(b)} off the curve (${JSON.stringify(p)})`);
      assert.ok(Math.abs(b[2]) <= reach + 1e-6, `${what}: a bead out of reach`);
    }
    if (w.head[2] >= -reach && w.tail[2] <= reach) assert.ok(o.beads.length >= 8, `${what}: arc ${w.time}: ${o.beads.length} beads`);
    for (const b of o.beads) {
      const p = arcPointAtZ(w.segments, b[2]);
      p[1] += w.lift(b[2]);
      figures.beads++;
      figures.lifted = Math.max(figures.lifted, Math.abs(w.lift(b[2])));
      figures.beadError = Math.max(figures.beadError, Math.hypot(p[0] - b[0], p[1] - b[1]));
    }
  }
}
// The largest differences seen (m), for the log.
const figures = { beads: 0, beadError: 0, objects: 0, objectError: 0, turned: 0, swapping: 0, lifted: 0 };

async function mapView(page, t) {
  await seekTo(page, t);
  await page.waitForTimeout(150);
  return page.evaluate(() => window.bsorStatus.map.inView);
}

for (const v of [2, 3, 4]) {
  await test(`map_v${v}_objects_at_their_times_and_places_and_the_score_unchanged`, async (page) => {
    await page.goto(`${base}?replay=map-v${v}&t=1`);
    const s = await until(page, "the map", (st) => (st.mapState !== "loading" && st.mapState !== "none" && st.framesRendered > 0) || st.lastError, 20);
    assert.equal(s.lastError, null);
    assert.equal(s.mapState, "matched", await page.textContent("#unknowns"));
    assert.equal(s.map.hash, mapsMade[v].hash);
    assert.equal(s.map.matched, true);
    const counts = { notes: fx.NOTES.length, bombs: fx.BOMBS.length, walls: fx.WALLS.length,
      arcs: fx.ARCS.length, chains: v === 2 ? 0 : fx.CHAINS.length };
    assert.deepEqual({ notes: s.map.notes, bombs: s.map.bombs, walls: s.map.walls, arcs: s.map.arcs, chains: s.map.chains }, counts);
    assert.ok(near(s.map.halfJump, halfJumpOf(v), 1e-6), `half jump ${s.map.halfJump} (want ${halfJumpOf(v)})`);
    // Every replay note event matched to its map note (v2 has no chains: their links not).
    const links = fx.CHAINS.reduce((n, c) => n + c.sc - 1, 0);
    assert.equal(s.map.eventsMatched, fx.replayEvents().length - (v === 2 ? links : 0));
    assert.match(await page.textContent("#unknowns"), new RegExp(`map ${mapsMade[v].hash}`));
    await page.keyboard.press("Space"); // paused
    const njsSeen = [];
    // Before and after the BPM change (6 s), a wall and a dodged bomb in view, a missed note
    // flying past, an arc, a chain.
    // A crossed pair mid-swap (0.5 s: v3 and v4; 0.8 s: v2). v4's NJS: 14 m/s to 6 s, eased down to 10 (7 s), held to 7.67 s, then up to 17 (8.33 s).
    for (const t of [0.5, 0.8, 1.8, 3.1, 3.6, 4.8, 5.2, 6.5, 6.75, 7.4, 7.9, 8.1]) {
      const shown = await mapView(page, t);
      if (v === 4) {
        const want = jumpOf(v, shown.t);
        assert.ok(near(shown.njs, want.njs, 1e-6) && near(shown.halfJump, want.half, 1e-6),
          `v4 at ${shown.t}: NJS ${shown.njs}, half jump ${shown.halfJump} (want ${JSON.stringify(want)})`);
        njsSeen.push(shown.njs);
      }
      assertView(v, shown);
    }
    if (v === 4) console.log(`  v4's NJS at the times checked: ${njsSeen.map((n) => n.toFixed(2)).join(", ")} m/s`);
    const past = await mapView(page, 4.8);
    const missed = past.objects.find((o) => o.kind === "note" && near(o.time, fx.seconds(9), 0.001));
    assert.ok(missed && missed.z < 0 && missed.fate === "miss", `the missed note flies past: ${JSON.stringify(missed)}`);
    const dodged = past.objects.find((o) => o.kind === "bomb" && near(o.time, fx.seconds(9.5), 0.001));
    assert.ok(dodged && dodged.fate === "none", "the dodged bomb is drawn");
    assert.ok((await mapView(page, 3.6)).walls.length > 0, "a wall in view");
    console.log(`  v${v}: ${figures.objects} objects (${figures.turned} in turned lanes, ${figures.swapping} crossed notes mid-swap) ` +
      `and ${figures.beads} arc beads checked so far, ` +
      `largest error ${(figures.objectError * 1000).toFixed(2)} mm (objects), ${(figures.beadError * 1000).toFixed(2)} mm (beads; ` +
      `moved by their ends' jump up to ${(figures.lifted * 100).toFixed(1)} cm)`);
    // The HUD's score is the replay's still.
    const end = await seekToEnd(page);
    assertHud(end, mapsMade[v].bsor, `v${v}'s end with the map`);
    if (v === 3) {
      // The screenshot for the docs: walls and bombs in view.
      await seekTo(page, 4.3);
      await page.waitForTimeout(300);
      await page.screenshot({ path: join(root, "docs", "figures", "player-map.png") });
    }
  });
}

await test("a_map_of_another_hash_is_said_and_the_replay_plays_from_its_events", async (page) => {
  // map-v3's replay with v4's zip named by &map= (same origin: the static server's).
  await page.goto(`${staticBase}?src=map-v3.bsors&map=map-v4.zip`);
  const s = await until(page, "the map's verdict", (st) => (st.mapState === "mismatch" && st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.lastError, null);
  assert.equal(s.map.matched, false);
  assert.equal(s.map.hash, mapsMade[4].hash);
  assert.match(await page.textContent("#unknowns"), new RegExp(`${mapsMade[4].hash}, not the replay's ${mapsMade[3].hash}`));
  assert.equal(await page.evaluate(() => window.bsorStatus.map.inView), null, "the scene is the replay's own");
});

await test("no_map_says_so_and_a_dropped_zip_is_taken", async (page) => {
  await page.goto(`${base}?replay=map-none`);
  let s = await until(page, "no map", (st) => (st.mapState === "missing" && st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.lastError, null);
  assert.match(await page.textContent("#unknowns"), /no map (ab){20} here: the scene is rebuilt from the replay's events/);
  // From the static server (no maps there), then the zip dropped (chosen) on the page.
  await page.goto(`${staticBase}?src=map-v4.bsors`);
  s = await until(page, "no map", (st) => (st.mapState === "missing" && st.framesRendered > 0) || st.lastError, 20);
  await page.setInputFiles("#file", join(tmp, "map-v4.zip"));
  s = await until(page, "the dropped map", (st) => st.mapState === "matched" || st.mapState === "failed", 20);
  assert.equal(s.mapState, "matched");
  assert.match(await page.textContent("#unknowns"), /a dropped zip/);
  // A zip whose entry inflates past the size it claims is refused, the replay played on.
  await page.goto(`${staticBase}?src=map-v3.bsors&map=map-lie.zip`);
  s = await until(page, "the bound", (st) => (st.mapState === "failed" && st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.mapState, "failed");
  assert.match(await page.textContent("#unknowns"), /Expert\.dat: inflates past its size .*rebuilt from the replay's events/);
  // A map of another origin is refused (the CSP allows none).
  await page.goto(`${staticBase}?src=map-v4.bsors&map=${encodeURIComponent(`${base}maps/${mapsMade[4].hash}.zip`)}`);
  s = await until(page, "refused", (st) => st.mapState === "refused" || st.lastError, 20);
  assert.equal(s.mapState, "refused");
});

// The song's output, tapped by web/tap.js (an AudioWorklet that posts the context time of
// each click onset in what the page's song node puts out), mapped to performance time through
// the context's output timestamp: `window.tapOnsets`. `window.tapSongTime(p)` is the replay's
// song time at performance time p (the page's song time then, between the frames around it),
// or null outside the frames.
const tapSong = (page) => page.evaluate(async (url) => {
    const m = window.bsorMusic;
    const ctx = m.ctx;
    await ctx.audioWorklet.addModule(url);
    const node = new AudioWorkletNode(ctx, "tap");
    m.out.connect(node);
    node.connect(ctx.destination);
    window.tapOnsets = [];
    node.port.onmessage = (e) => {
      const ts = ctx.getOutputTimestamp();
      window.tapOnsets.push(ts.performanceTime + (e.data - ts.contextTime) * 1000);
    };
  window.tapSongTime = (p) => {
    const c = window.bsorMusic.clock;
    let k = 0;
    while (k + 2 < c.length && c[k + 2] <= p) k += 2;
    if (!(c[k] <= p && k + 2 < c.length)) return null;
    return c[k + 1] + ((c[k + 3] - c[k + 1]) * (p - c[k])) / (c[k + 2] - c[k]);
  };
}, `${base}tap.js`);

await test("the_song_plays_in_step_with_the_replay_across_a_seek_and_a_speed_change", async (page) => {
  await page.goto(`${base}?replay=map-v3`);
  const s = await until(page, "the song", (st) => (st.audio && st.audio.state !== "decoding" && st.audio.state !== "none" &&
    st.audio.context === "running" && st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.audio.state, "ready", JSON.stringify(s.audio));
  assert.ok(s.mapFirstFrame !== null, "a frame with the map");
  await tapSong(page);
  await page.evaluate(() => { window.tapChanges = []; });
  // A seek by the timeline and a speed change, each noted in the page as it is made: the
  // 150 ms after one (the frame that starts the song again, and the sound already on its way
  // out) are not measured.
  const change = (id, value, kind) => page.evaluate(([id, value, kind]) => {
    window.tapChanges.push(performance.now());
    const el = document.getElementById(id);
    el.value = String(value);
    el.dispatchEvent(new Event(kind));
  }, [id, value, kind]);
  await change("timeline", 0.3, "input");
  await page.waitForTimeout(2500);
  await change("timeline", 6.1, "input");
  await page.waitForTimeout(1500);
  await change("speed", 1.5, "change");
  await page.waitForTimeout(2000);
  // Each onset's time on the replay's clock (the page's song time at that moment, between the
  // frames around it) against the click it is: the nearest multiple of 0.5 s.
  const r = await page.evaluate((every) => {
    const out = [];
    for (const p of window.tapOnsets) {
      if (window.tapChanges.some((m) => p >= m && p < m + 150)) continue;
      const t = window.tapSongTime(p);
      if (t === null) continue;
      out.push({ t, error: t - Math.round(t / every) * every });
    }
    return { onsets: window.tapOnsets.length, measured: out, restarts: window.bsorMusic.restarts };
  }, fx.CLICK_EVERY);
  const errors = r.measured.map((m) => Math.abs(m.error) * 1000);
  console.log(`  the song against the replay's clock: ${errors.length} clicks, error max ${Math.max(...errors).toFixed(1)} ms, ` +
    `median ${errors.sort((a, b) => a - b)[errors.length >> 1]?.toFixed(1)} ms (${r.restarts} starts)`);
  // At 1x from 0.3 s (5 clicks), from 6.1 s (3), then at 1.5x (6): at least 10 measured.
  assert.ok(r.measured.length >= 10, `clicks heard: ${JSON.stringify(r)}`);
  assert.ok(r.measured.some((m) => m.t > 6.1), "clicks after the seek");
  for (const m of r.measured) assert.ok(Math.abs(m.error) <= 0.04, `a click ${(m.error * 1000).toFixed(1)} ms off at ${m.t.toFixed(3)} s`);
});

await test("faster_song_paces_the_song_time_and_the_song_at_1_2x", async (page) => {
  await page.goto(`${base}?replay=map-fs`);
  const s = await until(page, "the song", (st) => (st.audio && st.audio.state === "ready" && st.audio.context === "running" &&
    st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.mapState, "matched");
  await tapSong(page);
  await page.evaluate(() => {
    const el = document.getElementById("timeline");
    window.tapFrom = performance.now();
    el.value = "0.5";
    el.dispatchEvent(new Event("input"));
  });
  await page.waitForTimeout(3000);
  const r = await page.evaluate((every) => {
    const c = window.bsorMusic.clock;
    // The song time's pace over the last 2 s of frames.
    let k0 = 0;
    while (k0 + 2 < c.length && c[k0] < c[c.length - 2] - 2000) k0 += 2;
    const pace = (c[c.length - 1] - c[k0 + 1]) / ((c[c.length - 2] - c[k0]) / 1000);
    const errors = [];
    for (const p of window.tapOnsets) {
      if (p < window.tapFrom + 150) continue;
      const t = window.tapSongTime(p);
      if (t === null) continue;
      errors.push(t - Math.round(t / every) * every);
    }
    return { pace, rate: window.bsorMusic.rate, errors };
  }, fx.CLICK_EVERY);
  console.log(`  Faster Song: song time at ${r.pace.toFixed(3)} s a second, the song at ${r.rate}x, ` +
    `${r.errors.length} clicks, error max ${Math.max(...r.errors.map(Math.abs)) * 1000 | 0} ms`);
  assert.ok(Math.abs(r.pace - 1.2) < 0.05, `the song time's pace: ${r.pace}`);
  assert.equal(r.rate, 1.2);
  assert.ok(r.errors.length >= 4, `clicks: ${r.errors.length}`);
  for (const e of r.errors) assert.ok(Math.abs(e) <= 0.04, `a click ${(e * 1000).toFixed(1)} ms off`);
});

// A live session whose map the relay serves, joined 3 s into the song (published at its own
// pace): the song starts at the song time shown and its clicks come out within 40 ms of the
// replay's clock, measured as above (the tap) against the irregular clicks' own times.
await test("live_session_joined_late_plays_its_song_from_the_song_time_in_step", async (page) => {
  const publishing = publish(relay.tcp, "map-live", join(tmp, "map-live.bsor"), 1);
  let songAt = 0;
  for (let i = 0; i < 100 && songAt < 3; i++) {
    await page.waitForTimeout(100);
    const list = await (await fetch(`${base}sessions`)).json();
    songAt = list.sessions.find((x) => x.name === "map-live")?.duration ?? 0;
  }
  assert.ok(songAt >= 3, `the session got 3 s in: ${songAt}`);
  await page.goto(`${base}?session=map-live`);
  const s = await until(page, "the song", (st) => (st.mode === "live" && st.mapState === "matched" && st.audio &&
    st.audio.state === "ready" && st.audio.context === "running" && st.framesRendered > 0) || st.lastError, 20);
  assert.equal(s.lastError, null);
  await tapSong(page);
  const joined = await page.evaluate(() => ({ at: performance.now(), songTime: window.bsorStatus.songTime }));
  await page.waitForTimeout(3000);
  const r = await page.evaluate((joined) => {
    const out = [];
    for (const p of window.tapOnsets) {
      if (p < joined.at) continue;
      const t = window.tapSongTime(p);
      if (t !== null) out.push(t);
    }
    return { onsets: window.tapOnsets.length, times: out, restarts: window.bsorMusic.restarts, rate: window.bsorMusic.rate };
  }, joined);
  // Each onset against the nearest of the song's clicks.
  const errors = r.times.map((t) => {
    const c = LIVE_CLICKS.reduce((a, b) => (Math.abs(b - t) < Math.abs(a - t) ? b : a));
    return { t, error: t - c };
  });
  const ms = errors.map((e) => Math.abs(e.error) * 1000);
  console.log(`  live, joined at song time ${joined.songTime.toFixed(2)} s: ${errors.length} clicks from ` +
    `${errors[0]?.t.toFixed(2)} s, error max ${Math.max(...ms).toFixed(1)} ms, median ` +
    `${ms.sort((a, b) => a - b)[ms.length >> 1]?.toFixed(1)} ms (${r.restarts} starts)`);
  assert.ok(joined.songTime >= 2.5, `joined late: ${joined.songTime}`);
  assert.ok(errors.length >= 4, `clicks heard: ${JSON.stringify(r)}`);
  assert.ok(errors[0].t >= joined.songTime - 0.1 && errors[0].t < joined.songTime + 1.5,
    `the first click heard is the song's at the time shown: ${errors[0].t} (joined at ${joined.songTime})`);
  for (const e of errors) assert.ok(Math.abs(e.error) <= 0.04, `a click ${(e.error * 1000).toFixed(1)} ms off at ${e.t.toFixed(3)} s`);
  assert.equal(await publishing, 0);
});

await test("a_browser_that_holds_sound_gets_asked_for_a_gesture", async (page) => {
  // Headless Chromium 156 starts Web Audio without a gesture whatever its autoplay flags
  // (Playwright's default, none, or --autoplay-policy=document-user-activation-required: the
  // context runs in each, measured), so the test emulates a desktop browser's policy itself
  // (the context suspended, resumed only after a gesture) and expects the page to ask.
  await page.goto(`${base}?replay=map-v3`);
  await until(page, "the song", (st) => (st.audio && st.audio.state === "ready") || st.lastError, 20);
  // The policy, emulated: the context suspended, and resumed only after a user's gesture.
  await page.evaluate(() => {
    const ctx = window.bsorMusic.ctx;
    const resume = ctx.resume.bind(ctx);
    let gesture = false;
    window.addEventListener("pointerdown", () => { gesture = true; }, true);
    ctx.resume = () => (gesture ? resume() : Promise.resolve());
    return ctx.suspend();
  });
  const s = await until(page, "the page asks", (st) => (st.audio && st.audio.needsGesture) || st.lastError, 10);
  assert.equal(s.audio.context, "suspended");
  await page.waitForFunction(() => !document.getElementById("sound").hidden);
  assert.equal(await page.isVisible("#sound"), true, "the page asks for a click");
  await page.click("#sound");
  const after = await until(page, "the song runs", (st) => st.audio && st.audio.context === "running", 10);
  assert.equal(after.audio.needsGesture, false);
  await page.waitForFunction(() => document.getElementById("sound").hidden);
});

// ---- real replays (BSOR_CORPUS), published to the relay and opened from its archive ----
const corpusDir = process.env.BSOR_CORPUS;
const corpus = corpusDir && existsSync(corpusDir)
  ? readdirSync(corpusDir).filter((f) => f.endsWith(".bsor")).sort().map((f) => join(corpusDir, f)) : [];
if (!corpus.length) {
  console.log("browser: BSOR_CORPUS not set or empty: the tests on real replays are skipped");
}
const published = new Map(); // corpus file -> session name
for (const file of corpus) {
  const name = `corpus-${basename(file, ".bsor").replace(/[^A-Za-z0-9._-]/g, "_")}`;
  // As a recorder publishes it (a keyframe a second, a flush every 0.1 s), as fast as it goes.
  assert.equal(await publish(relay.tcp, name, file, 0), 0, `publish ${name}`);
  published.set(file, name);
}
if (corpus.length) {
  // The archive is written once the session ends.
  for (let i = 0; i < 50 && ![...published.values()].every((n) => existsSync(join(tmp, "archive", `${n}.bsors`))); i++) {
    await new Promise((ok) => { setTimeout(ok, 100); });
  }
}

for (const file of corpus) {
  const name = published.get(file);
  const finalScore = Number(/^score\s+(\d+)/m.exec(run("info", file))[1]);
  await test(`real_replay_${name}_by_url_has_the_right_hud_at_every_seek`, async (page) => {
    const failed = failures(page);
    for (const t of [null, 45]) {
      await page.goto(`${base}?replay=${name}${t === null ? "" : `&t=${t}`}`);
      const s = await until(page, `${name} at ${t}: the first frame`, (st) => st.afterSeek || st.lastError, 30);
      assert.equal(s.lastError, null);
      if (t !== null) assert.ok(s.afterSeek.songTime >= t && s.afterSeek.songTime < t + 0.5, `starts at ${t}`);
      assertHud(s.afterSeek, file, `${name}, first frame${t === null ? "" : ` at &t=${t}`}`);
    }
    const opened = await until(page, "every event is in", (st) => st.eventsTo === "all", 30);
    assert.ok(opened.reads <= 16, `at most 16 requests to open it (and play a little): ${opened.reads}`);
    await page.keyboard.press("Space");
    const max = Number(await page.getAttribute("#timeline", "max"));
    for (const f of [0.9, 0.25, 0.6]) assertHud(await seekTo(page, max * f), file, `${name}, a seek to ${f} of it`);
    // Placement from the replay's own data, said on screen (web/place.js; residuals:
    // scripts/browser/residuals.mjs).
    const placed = await page.textContent("#speedNote");
    assert.match(placed, /note jump speed \d+\.\d m\/s \(fitted from \d+ cuts/, placed);
    assert.match(placed, /jump distance \d+\.\d m \(from the replay\)/, placed);
    const njs = (await status(page)).njs;
    assert.ok(njs > 10 && njs < 25, `a fitted jump speed a map could have: ${njs}`);
    // Figures: the moment at 60% in first person and from behind.
    for (const cam of ["first", "behind"]) {
      await page.selectOption("#camera", cam);
      await seekTo(page, max * 0.6);
      await page.waitForTimeout(200);
      await page.screenshot({ path: join(shots, `real-${name}-${cam}.png`) });
    }
    const end = await seekToEnd(page);
    assert.equal(end.score, finalScore, `${name}: the replay's final score`);
    const s = await status(page);
    assert.equal(s.lastError, null);
    assert.deepEqual(failed, []);
  });
}

if (corpus.length) {
  // A real replay live (at 12 times its speed): one viewer from the start, one joining 40 s
  // into the song; both end with the replay's score, the late one right from its first frame.
  const liveFile = corpus.find((f) => basename(f) === "test.bsor") ?? corpus[0];
  const liveScore = Number(/^score\s+(\d+)/m.exec(run("info", liveFile))[1]);
  await test("real_replay_live_from_the_start_and_joined_late_ends_with_its_score", async (page) => {
    const late = await newPage();
    try {
      await page.goto(`${base}?session=real-live`);
      await page.waitForFunction(() => /waiting for/.test(document.getElementById("mode").textContent));
      const published = publish(relay.tcp, "real-live", liveFile, 12);
      let songAt = 0;
      for (let i = 0; i < 200 && songAt < 40; i++) {
        await late.waitForTimeout(100);
        const list = await (await fetch(`${base}sessions`)).json();
        songAt = list.sessions.find((x) => x.name === "real-live")?.duration ?? 0;
      }
      assert.ok(songAt >= 40, "the session got 40 s in");
      await late.goto(`${base}?session=real-live`);
      const joined = await until(late, "the late viewer's first frame", (st) => st.afterSeek || st.lastError, 20);
      assert.equal(joined.lastError, null);
      assert.ok(joined.afterSeek.songTime >= 35, `joined late: ${joined.afterSeek.songTime}`);
      assertHud(joined.afterSeek, liveFile, "the late viewer's first frame");
      assert.equal(await published, 0);
      for (const [who, p] of [["from the start", page], ["joined late", late]]) {
        const s = await until(p, `${who}: the end`, (st) => st.ended, 30);
        assert.equal(s.score, liveScore, `${who}: the replay's final score`);
        assert.equal(s.lastError, null, who);
      }
      assert.deepEqual(late.errors, []);
    } finally {
      await late.close();
    }
  });

  // The densest real replay, loaded again and again at one point: never a false damage.
  const file = corpus.map((f) => [f, statSync(f).size]).sort((a, b) => b[1] - a[1])[0][0];
  const name = published.get(file);
  await test("real_replay_loaded_again_and_again_is_never_damaged", async (page) => {
    const failed = failures(page);
    for (let i = 0; i < 4; i++) {
      await page.goto(`${base}?replay=${name}&t=60`);
      const s = await until(page, `load ${i + 1}`, (st) => (st.afterSeek && st.eventsTo === "all") || st.lastError, 30);
      assert.equal(s.lastError, null, `load ${i + 1}`);
      assertHud(s.afterSeek, file, `load ${i + 1}`);
    }
    assert.deepEqual(failed, []);
  });
}

await browser.close();
for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
statics.close();
rmSync(tmp, { recursive: true, force: true });
console.log(`\ntest result: ${failed ? "FAILED" : "ok"}. ${passed} passed; ${failed} failed`);
process.exit(failed ? 1 : 0);
