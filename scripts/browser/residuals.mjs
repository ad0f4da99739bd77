// The note placement of web/place.js against the cut points real players recorded:
// `node scripts/browser/residuals.mjs [DIR]` (DIR: BSOR_CORPUS by default) decodes each
// `.bsor` with the page's own decoder (web/bsor_stream.wasm), fits the note jump speed as
// the page does, and prints, per replay, the fit and the residuals between each cut's
// point and the drawn note's centre at its cut time, next to those of the placement before
// (rows 0.6 m apart, every note at z = 0.7 m when cut).
import { readFileSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { NjsFit, laneX, rowY, jumpOffset, heightAt, noteAt } from "../../web/place.js";

const web = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "web");
const dir = process.argv[2] || process.env.BSOR_CORPUS;
if (!dir) {
  console.log("residuals: give a folder of .bsor files (or set BSOR_CORPUS)");
  process.exit(0);
}
const module = new WebAssembly.Module(readFileSync(join(web, "bsor_stream.wasm")));
const q = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN;
};
const f2 = (v) => v.toFixed(2);
const f3 = (v) => v.toFixed(3);
for (const name of readdirSync(dir).filter((f) => f.endsWith(".bsor")).sort()) {
  const w = new WebAssembly.Instance(module, {}).exports;
  const b = readFileSync(join(dir, name));
  const at = w.input_reserve(b.length);
  new Uint8Array(w.memory.buffer, at, b.length).set(b);
  if (w.bsor_load() !== 0) {
    console.log(`${name}: does not load`);
    continue;
  }
  const messages = JSON.parse(Buffer.from(new Uint8Array(w.memory.buffer, w.output_ptr(), w.output_len())).toString());
  const info = messages.find((m) => m.type === "header").info;
  const ev = new Float32Array(w.memory.buffer, w.events_ptr(), w.events_len()).slice();
  const notes = [];
  const heights = [];
  for (let i = 0; i < ev.length; i += 18) {
    const r = ev.subarray(i, i + 18);
    if (r[0] === 2) heights.push({ t: r[1], height: r[2] });
    if (r[0] === 0 && (r[8] === 1 || r[8] === 2)) {
      notes.push({ t: r[1], spawn: r[2], line: r[3], layer: r[4], cut: [r[12], r[13], r[14]] });
    }
  }
  const fit = new NjsFit();
  for (const n of notes) fit.add(n.spawn, n.t, n.cut[2]);
  const now = { x: [], y: [], z: [], d: [] };
  const old = { x: [], y: [], z: [], d: [] };
  const rows = [[], [], []];
  const p = [0, 0, 0];
  for (const n of notes) {
    const h = heightAt(info, heights, n.t);
    const off = jumpOffset(h);
    noteAt(n, n.t, fit, off, p);
    const d = [n.cut[0] - p[0], n.cut[1] - p[1], n.cut[2] - p[2]];
    now.x.push(Math.abs(d[0]));
    now.y.push(Math.abs(d[1]));
    now.z.push(Math.abs(d[2]));
    now.d.push(Math.hypot(...d));
    const o = [n.cut[0] - laneX(n.line), n.cut[1] - (0.85 + 0.6 * n.layer + (h - 1.8) * 0.5), n.cut[2] - 0.7];
    old.x.push(Math.abs(o[0]));
    old.y.push(Math.abs(o[1]));
    old.z.push(Math.abs(o[2]));
    old.d.push(Math.hypot(...o));
    if (n.layer >= 0 && n.layer <= 2) rows[n.layer].push(n.cut[1] - off);
  }
  console.log(`${name}: ${notes.length} cuts; ${info.difficulty}; jump distance ${f2(info.jumpDistance)} m (info); ` +
    `height ${f2(info.height)} m; NJS fitted ${f2(fit.njs)} m/s, a note at its own time ${f3(fit.reach)} m ahead (fitted)`);
  console.log(`  cut y by row (less the jump offset), median: ${rows.map((r) => f3(q(r, 0.5))).join(" / ")} ` +
    `(drawn at ${[0, 1, 2].map((l) => f2(rowY(l))).join(" / ")})`);
  for (const [label, r] of [["now   ", now], ["before", old]]) {
    console.log(`  ${label} |dx| ${f3(q(r.x, 0.5))} |dy| ${f3(q(r.y, 0.5))} |dz| ${f3(q(r.z, 0.5))} m median; ` +
      `distance median ${f3(q(r.d, 0.5))} p90 ${f3(q(r.d, 0.9))} m`);
  }
}
