// Instantiates the wasm32 module in node with no imports and decodes test vectors through
// its exports; the bytes must equal the vectors' expected BSOR. Run by scripts/wasm-test.sh.
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const [wasmPath, vectors] = process.argv.slice(2);
const module = new WebAssembly.Module(readFileSync(wasmPath));
assert.deepEqual(WebAssembly.Module.imports(module), [], "the module imports nothing");
const { exports } = new WebAssembly.Instance(module, {});

function call(fn, input) {
  const at = exports.input_reserve(input.length);
  new Uint8Array(exports.memory.buffer, at, input.length).set(input);
  const code = exports[fn]();
  const out = new Uint8Array(exports.memory.buffer, exports.output_ptr(), exports.output_len());
  return { code, out: Buffer.from(out) };
}

let passed = 0;
for (const [stream, bsor] of [
  ["synthetic.lossless.bsors", "synthetic.bsor"],
  ["synthetic.compact.bsors", "synthetic.compact.decoded.bsor"],
  ["edge.fine.bsors", "edge.fine.decoded.bsor"],
  ["clock.compact.bsors", "clock.compact.decoded.bsor"],
]) {
  const { code, out } = call("stream_to_bsor", readFileSync(`${vectors}/${stream}`));
  assert.equal(code, 0, `${stream}: ${out.toString()}`);
  assert.ok(out.equals(readFileSync(`${vectors}/${bsor}`)), `${stream} decodes to ${bsor}`);
  passed++;
}
const bad = call("bsor_check", Buffer.from("not a replay"));
assert.equal(bad.code, -1);
assert.match(bad.out.toString(), /./, "an error comes with its text");
passed++;
console.log(`wasm: ${passed} passed, 0 failed`);
