// The player's tests in a real headless Chromium (Debian's, driven by playwright-core):
// run by scripts/browser-test.sh as `node test.mjs BSOR_STREAM_BINARY`. Starts a relay on
// 127.0.0.1; the page comes from the relay when it serves web/ (GET / answers HTML), else
// from a static server here that sends the contract's headers (CSP included). Screenshots
// go to target/browser/. Everything temporary is removed at the end.
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, writeFileSync, rmSync, mkdirSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, extname, basename } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

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

// ---- servers ----
function serveStatic() {
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const name = url.pathname === "/" ? "index.html" : basename(url.pathname);
    const file = [join(web, name), join(tmp, name)].find((f) => existsSync(f) && name !== "README.md");
    if (!file) { res.writeHead(404); res.end("not found"); return; }
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] || "application/octet-stream",
      "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff" });
    res.end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}

function startRelay(origin) {
  writeFileSync(join(tmp, "token"), "secret\n");
  const child = spawn(bin, ["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0",
    "--token-file", join(tmp, "token"), "--archive", join(tmp, "archive"), "--allow-origin", origin],
  { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "warn" } });
  children.push(child);
  child.stderr.resume();
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
function saberPixels(page) {
  return page.evaluate(() => {
    const src = document.getElementById("view");
    const c = document.createElement("canvas");
    c.width = src.width;
    c.height = src.height;
    const g = c.getContext("2d");
    g.drawImage(src, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let red = 0;
    let blue = 0;
    for (let i = 0; i < d.length; i += 4) {
      const [r, gr, b] = [d[i], d[i + 1], d[i + 2]];
      if (r > 120 && r > 2.5 * gr && r > 2.5 * b) red++;
      if (b > 120 && b > 1.6 * r && b > 1.3 * gr) blue++;
    }
    return { red, blue };
  });
}

async function test(name, body) {
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
const relay = await startRelay(staticBase.slice(0, -1));
// The page from the relay when it serves it, else from the static server.
let base = `http://${relay.ws}/`;
let wsParam = "";
try {
  const res = await fetch(base);
  if (!res.ok || !(res.headers.get("content-type") || "").startsWith("text/html")) throw new Error();
} catch {
  base = staticBase;
  wsParam = `&ws=${encodeURIComponent(`ws://${relay.ws}/`)}`;
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

await test("stored_replay_plays_from_t", async (page) => {
  const src = base === staticBase ? `?src=synthetic.bsors` : `?replay=live1`;
  await page.goto(`${base}${src}&t=15${wsParam}`);
  const s = await until(page, "the replay plays", (st) => st.framesDecoded === expectedFrames && st.framesRendered > 3, 20);
  assert.ok(s.songTime >= 15, `starts at &t=15: ${s.songTime}`);
  assert.equal(s.mode, "replay");
  const end = await until(page, "the replay ends", (st) => st.ended, 30);
  assert.equal(end.score, expectedScore);
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
});

await browser.close();
for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
statics.close();
rmSync(tmp, { recursive: true, force: true });
console.log(`\ntest result: ${failed ? "FAILED" : "ok"}. ${passed} passed; ${failed} failed`);
process.exit(failed ? 1 : 0);
