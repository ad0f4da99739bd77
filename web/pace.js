// Frame pacing. The player draws at the display's rate while the machine keeps up with it;
// when it does not (frames miss their vsync: a software renderer, a busy machine), it draws
// every other frame, at a steady half rate, rather than at an irregular rate that keeps the
// machine saturated, and tries the full rate again later. On this project's 2-core test
// machine, where Chromium renders WebGL in software, the full rate kept 1.65 of the 2 cores
// busy in the GPU process and the half rate 1.0 (docs/benchmarks.md, "The browser player").
//
// `?rate=full` or `?rate=half` fixes the rate; `auto` (the default) chooses it as above.

// Frames counted before a decision, and of those, how many may miss their vsync.
const WINDOW = 120;
const LATE_ALLOWED = 6; // 5%
// A frame is late when it comes this many display periods or more after the one before.
const LATE_FACTOR = 1.5;
// The first frames (page load, shader compilation) are not counted.
const WARM_UP = 60;
// After falling back to half rate, the full rate is tried again after this long, doubling
// each time it fails again, up to the maximum.
const RETRY_MS = 10000;
const RETRY_MAX_MS = 80000;

export class Pacer {
  constructor(mode = "auto") {
    this.mode = mode === "full" || mode === "half" ? mode : "auto";
    this.half = this.mode === "half";
    this.last = null; // the time of the last animation frame (ms)
    this.period = Infinity; // the display's period: the shortest interval of the last window
    this.shortest = Infinity; // the shortest interval of this window so far
    this.seen = 0; // animation frames so far
    this.counted = 0; // intervals counted in this window (at full rate)
    this.late = 0; // of those, late
    this.retryAt = 0; // when to try the full rate again
    this.retryMs = RETRY_MS;
    this.changes = 0; // rate changes so far
    this.lastChange = ""; // why the rate last changed
  }

  // Called at every animation frame, drawn or not, with its time (ms). Returns true when
  // the rate has just changed (this.half and this.lastChange say to what and why).
  frame(now) {
    const dt = this.last === null ? null : now - this.last;
    this.last = now;
    this.seen++;
    if (dt === null || !(dt > 0)) return false;
    if (dt >= 4) this.shortest = Math.min(this.shortest, dt);
    if (this.mode !== "auto") return false;
    if (this.half) {
      if (now < this.retryAt) return false;
      this.half = false;
      this.startWindow();
      return this.changed("full rate: trying the display's rate again");
    }
    if (this.seen <= WARM_UP) return false;
    const period = Math.min(this.period, this.shortest);
    this.counted++;
    if (dt >= LATE_FACTOR * period) this.late++;
    if (this.counted < WINDOW) return false;
    const late = this.late;
    this.period = this.shortest;
    this.startWindow();
    if (late <= LATE_ALLOWED) {
      this.retryMs = RETRY_MS;
      return false;
    }
    this.half = true;
    this.retryAt = now + this.retryMs;
    this.retryMs = Math.min(2 * this.retryMs, RETRY_MAX_MS);
    return this.changed(`half rate: ${late} of ${WINDOW} frames missed the display's rate`);
  }

  startWindow() {
    this.counted = 0;
    this.late = 0;
    this.shortest = Infinity;
  }

  changed(why) {
    this.changes++;
    this.lastChange = why;
    return true;
  }
}
