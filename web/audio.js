// The map's song, played in step with the replay's clock (Web Audio): the page calls `sync`
// every frame with the song time it shows, whether it plays, and the rate; the song is
// (re)started at that song time when it is not playing where it should (a seek, a pause
// ended, a new rate, drift past 25 ms), timed through the context's output timestamp so that
// what is heard at a moment is the song at the time shown then. Decoding never holds a
// frame: the scene plays on without the song until it is ready. Where the browser wants a
// gesture before sound, `needsGesture` says so and `resume` (from a click) starts it.

const DRIFT = 0.025; // s of song time the song may be off before it is started again

// The game's song speed for a replay's modifiers (FS 1.2, SF 1.5, SS 0.85) and practice
// speed: replay times are song times, so this is the pace the song time passes at.
export function songSpeed(info) {
  if (info && info.speed > 0 && info.speed < 10) return info.speed;
  const mods = String(info?.modifiers ?? "").split(",").map((m) => m.trim().toUpperCase());
  if (mods.includes("SF")) return 1.5;
  if (mods.includes("FS")) return 1.2;
  if (mods.includes("SS")) return 0.85;
  return 1;
}

export class Music {
  constructor() {
    this.ctx = null;
    this.buffer = null;
    this.state = "none"; // none, decoding, ready, failed
    this.error = null;
    this.source = null;
    this.rate = 1;
    this.startCtx = 0; // context time the source's `offset` plays at
    this.offset = 0;
    this.volume = 0.8;
    this.muted = false;
    this.hits = false;
    this.restarts = 0;
    this.clock = []; // (performance time, song time) of recent frames, for tests
  }

  context() {
    if (!this.ctx) {
      const Ctx = window.AudioContext || window.webkitAudioContext;
      if (!Ctx) throw new Error("this browser has no Web Audio");
      this.ctx = new Ctx({ latencyHint: "interactive" });
      this.gain = this.ctx.createGain();
      this.gain.gain.value = this.muted ? 0 : this.volume;
      this.gain.connect(this.ctx.destination);
      // The sound a test listens to (the tap goes here, before the speakers).
      this.out = this.gain;
    }
    return this.ctx;
  }

  // Decodes the song (a promise of its bytes), off the page's frame: the scene does not wait.
  async load(bytes) {
    this.state = "decoding";
    const mine = (this.loads = (this.loads || 0) + 1);
    try {
      const ctx = this.context();
      const b = await bytes;
      const copy = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
      const buffer = await ctx.decodeAudioData(copy);
      if (mine !== this.loads) return; // unloaded meanwhile
      this.buffer = buffer;
      this.state = "ready";
    } catch (e) {
      if (mine !== this.loads) return;
      this.state = "failed";
      this.error = e.message || String(e);
    }
  }

  get needsGesture() {
    return this.state === "ready" && this.ctx && this.ctx.state !== "running";
  }

  resume() {
    if (this.ctx) this.ctx.resume().catch(() => {});
  }

  setVolume(v) {
    this.volume = v;
    if (this.gain) this.gain.gain.value = this.muted ? 0 : v;
  }

  setMuted(m) {
    this.muted = m;
    if (this.gain) this.gain.gain.value = m ? 0 : this.volume;
  }

  // The context time at performance time `now` (ms), through the output timestamp.
  ctxTimeAt(now) {
    const ts = this.ctx.getOutputTimestamp ? this.ctx.getOutputTimestamp() : null;
    if (ts && ts.performanceTime > 0) return ts.contextTime + (now - ts.performanceTime) / 1000;
    return this.ctx.currentTime + (this.ctx.outputLatency || 0);
  }

  // Forgets the song (another replay or map): nothing plays until the next `load`.
  unload() {
    this.stop();
    this.buffer = null;
    this.state = "none";
    this.error = null;
    this.loads = (this.loads || 0) + 1;
  }

  stop() {
    if (this.source) {
      try {
        this.source.stop();
      } catch {
        // (already stopped)
      }
      this.source.disconnect();
      this.source = null;
    }
  }

  // Called every frame: song time t shown at performance time now (ms), playing or not, at
  // `rate` song seconds a second.
  sync(t, playing, rate, now) {
    if (this.clock.length >= 2048) this.clock.splice(0, 1024);
    this.clock.push(now, t);
    if (this.state !== "ready") return;
    if (this.ctx.state !== "running") {
      // Asked once: where the browser lets sound start without a gesture this starts it;
      // elsewhere the page asks for one (`needsGesture`).
      if (!this.resumed && playing) {
        this.resumed = true;
        this.resume();
      }
      return;
    }
    if (!playing || !(rate > 0) || t >= this.buffer.duration) {
      this.stop();
      return;
    }
    const at = this.ctxTimeAt(now);
    if (this.source && this.rate === rate) {
      const heard = this.offset + (at - this.startCtx) * rate;
      if (Math.abs(heard - t) <= DRIFT) return;
    }
    this.start(t, rate, at);
  }

  // Starts the song so that song time t is heard at context time `at`.
  start(t, rate, at) {
    this.stop();
    const ctx = this.ctx;
    const s = ctx.createBufferSource();
    s.buffer = this.buffer;
    s.playbackRate.value = rate;
    s.connect(this.gain);
    // Not before the context's next sample: later, and further into the song.
    const when = Math.max(at, ctx.currentTime);
    const offset = Math.max(0, t + (when - at) * rate);
    s.start(when, offset);
    this.source = s;
    this.rate = rate;
    this.startCtx = when; // `offset` plays at `when`
    this.offset = offset;
    this.restarts++;
  }

  // A short tick for a cut, now.
  hit() {
    if (!this.hits || !this.ctx || this.ctx.state !== "running" || this.muted) return;
    const ctx = this.ctx;
    const o = ctx.createOscillator();
    const g = ctx.createGain();
    o.frequency.value = 1800;
    g.gain.setValueAtTime(0.3, ctx.currentTime);
    g.gain.exponentialRampToValueAtTime(0.001, ctx.currentTime + 0.05);
    o.connect(g);
    g.connect(this.gain);
    o.start();
    o.stop(ctx.currentTime + 0.06);
  }
}
