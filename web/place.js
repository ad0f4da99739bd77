// Where the notes are drawn, from the replay's own data: BSOR records no map, so the note
// jump speed is fitted from the cuts (each good or bad cut's point against how long before
// the note's time it was cut), and the grid's height follows the player's height as the
// game's jump offset does. Pure functions and a running fit: the page and
// scripts/browser/residuals.mjs (the residuals on real replays) use the same.

// The game's grid: lanes 0.6 m apart around the middle; rows at its base, upper and top
// line heights.
export const laneX = (line) => (line - 1.5) * 0.6;
const ROWS = [0.85, 1.4, 1.9];
export const rowY = (layer) => (layer >= 0 && layer <= 2 ? ROWS[layer] : 0.85 + 0.55 * layer);

// The game's jump offset for a player height h (m): the grid moves up or down with it.
export const jumpOffset = (h) => Math.min(0.6, Math.max(-0.2, (h - 1.8) * 0.5));

// The player's height at song time t: the last height event at or before it, else the
// info's; heights outside 0.5 to 3 m are not taken.
export function heightAt(info, heights, t) {
  let h = info && info.height > 0.5 && info.height < 3 ? info.height : 1.8;
  for (const e of heights) {
    if (e.t > t) break;
    if (e.height > 0.5 && e.height < 3) h = e.height;
  }
  return h;
}

// Before this many cuts, the assumed speed.
const MIN_CUTS = 8;
export const ASSUMED_NJS = 16;

// Least squares of the cut points' z against d = (spawn time − cut time): z = reach + njs·d.
// `reach` is where the cuts put a note at its own time (its spawn time in BSOR's words):
// 0.6 to 1.1 m ahead on the real replays here, the player's reach and where they stand in
// the room, not a fixed plane; a note is drawn there at its time.
export class NjsFit {
  constructor() {
    this.reset();
  }
  reset() {
    this.n = 0;
    this.sd = 0;
    this.sz = 0;
    this.sdd = 0;
    this.sdz = 0;
    this.njs = ASSUMED_NJS;
    this.reach = 0;
  }
  // A cut: its note's spawn time, the cut time, the cut point's z.
  add(spawn, t, z) {
    const d = spawn - t;
    if (!(d > -0.2 && d < 1.5 && z > -1 && z < 6)) return;
    this.n++;
    this.sd += d;
    this.sz += z;
    this.sdd += d * d;
    this.sdz += d * z;
    if (this.n < MIN_CUTS) return;
    const den = this.n * this.sdd - this.sd * this.sd;
    if (!(den > 1e-9)) return;
    const njs = (this.n * this.sdz - this.sd * this.sz) / den;
    if (!(njs > 3 && njs < 40)) return;
    this.njs = njs;
    this.reach = (this.sz - njs * this.sd) / this.n;
  }
  get fitted() {
    return this.n >= MIN_CUTS && this.njs !== ASSUMED_NJS;
  }
}

// A note's place in game coordinates at song time t (z ahead of the player), given the
// fit and the grid's offset: z = (spawn time − t) · NJS + reach.
export function noteAt(n, t, fit, offset, out) {
  out[0] = laneX(n.line);
  out[1] = rowY(n.layer) + offset;
  out[2] = (n.spawn - t) * fit.njs + fit.reach;
  return out;
}
