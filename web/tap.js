// An AudioWorklet that listens to the sound it is given and posts the context time of each
// onset (a sample past 0.2 after 0.2 s of quiet): what the song node actually puts out, for
// the browser tests' and the benchmark's measure of the song against the replay's clock
// (scripts/browser/test.mjs). The page loads it only when asked.
class Tap extends AudioWorkletProcessor {
  constructor() {
    super();
    this.last = -1;
  }

  process(inputs) {
    const x = inputs[0] && inputs[0][0];
    if (x) {
      for (let i = 0; i < x.length; i++) {
        if (Math.abs(x[i]) > 0.2) {
          const t = currentTime + i / sampleRate;
          if (t - this.last > 0.2) this.port.postMessage(t);
          this.last = t;
        }
      }
    }
    return true;
  }
}
registerProcessor("tap", Tap);
