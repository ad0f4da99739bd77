// A small zip reader for map zips (BeatSaver's: Info.dat, a .dat per difficulty, the song):
// the central directory at the end, then each entry asked for, inflated in the page with
// DecompressionStream("deflate-raw"). Bounded: the zip's size, the entries' count, and each
// entry's inflated size (the bytes out are counted as they come, whatever the directory
// claims). No ZIP64, no encryption: a map zip needs neither.

export const ZIP_LIMITS = {
  zipBytes: 64 << 20, // the whole zip
  entries: 512,
  entryBytes: 64 << 20, // one entry inflated (a song)
  totalBytes: 160 << 20, // every entry read, inflated, together
};

const EOCD = 0x06054b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;

export class ZipError extends Error {}

// The entries of a zip (an ArrayBuffer or Uint8Array): a Map from name to entry.
export function readZip(bytes, limits = ZIP_LIMITS) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  if (u8.length > limits.zipBytes) throw new ZipError(`the zip is over ${limits.zipBytes >> 20} MiB`);
  if (u8.length < 22) throw new ZipError("not a zip (too short)");
  const dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  // The end of central directory record: within the last 22 + 65535 bytes (its comment).
  let eocd = -1;
  for (let i = u8.length - 22; i >= Math.max(0, u8.length - 22 - 65535); i--) {
    if (dv.getUint32(i, true) === EOCD) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new ZipError("not a zip (no end of central directory)");
  const count = dv.getUint16(eocd + 10, true);
  const cdSize = dv.getUint32(eocd + 12, true);
  const cdOffset = dv.getUint32(eocd + 16, true);
  if (count === 0xffff || cdOffset === 0xffffffff) throw new ZipError("ZIP64 zips are not read");
  if (count > limits.entries) throw new ZipError(`the zip has over ${limits.entries} entries`);
  if (cdOffset + cdSize > eocd) throw new ZipError("the zip's central directory is out of bounds");
  const entries = new Map();
  let p = cdOffset;
  const decoder = new TextDecoder();
  for (let k = 0; k < count; k++) {
    if (p + 46 > eocd || dv.getUint32(p, true) !== CENTRAL) throw new ZipError(`the zip's entry ${k} is damaged`);
    const flags = dv.getUint16(p + 8, true);
    const method = dv.getUint16(p + 10, true);
    const compressed = dv.getUint32(p + 20, true);
    const size = dv.getUint32(p + 24, true);
    const nameLen = dv.getUint16(p + 28, true);
    const extraLen = dv.getUint16(p + 30, true);
    const commentLen = dv.getUint16(p + 32, true);
    const local = dv.getUint32(p + 42, true);
    if (p + 46 + nameLen > eocd) throw new ZipError(`the zip's entry ${k} is damaged`);
    const name = decoder.decode(u8.subarray(p + 46, p + 46 + nameLen));
    p += 46 + nameLen + extraLen + commentLen;
    if (name.endsWith("/")) continue; // a folder
    entries.set(name, { name, flags, method, compressed, size, local, u8, dv });
  }
  // Bytes inflated so far, over every entry of this zip.
  const spent = { used: 0 };
  // An entry by its name, or by the name in another case (Info.dat and the files it names
  // are matched so on case-insensitive file systems).
  const find = (name) => entries.get(name) ??
    [...entries.values()].find((e) => e.name.toLowerCase() === String(name).toLowerCase());
  return { entries, find, read: (name) => readEntry(find(name), limits, spent), names: [...entries.keys()] };
}

// An entry's bytes (a Uint8Array), inflated and bounded.
export async function readEntry(e, limits = ZIP_LIMITS, spent = { used: 0 }) {
  if (!e) throw new ZipError("no such entry");
  if (e.flags & 1) throw new ZipError(`${e.name}: encrypted`);
  if (e.size > limits.entryBytes) throw new ZipError(`${e.name}: over ${limits.entryBytes >> 20} MiB inflated`);
  const { u8, dv } = e;
  if (e.local + 30 > u8.length || dv.getUint32(e.local, true) !== LOCAL) throw new ZipError(`${e.name}: damaged`);
  const start = e.local + 30 + dv.getUint16(e.local + 26, true) + dv.getUint16(e.local + 28, true);
  if (start + e.compressed > u8.length) throw new ZipError(`${e.name}: cut short`);
  const raw = u8.subarray(start, start + e.compressed);
  const most = Math.min(limits.entryBytes, e.size);
  if (spent.used + most > limits.totalBytes) throw new ZipError(`the zip's entries are over ${limits.totalBytes >> 20} MiB inflated`);
  if (e.method === 0) {
    if (e.compressed !== e.size) throw new ZipError(`${e.name}: damaged`);
    spent.used += e.size;
    return raw;
  }
  if (e.method !== 8) throw new ZipError(`${e.name}: compression method ${e.method} is not read`);
  if (typeof DecompressionStream !== "function") throw new ZipError("this browser cannot inflate (no DecompressionStream)");
  const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  const reader = stream.getReader();
  const out = new Uint8Array(most);
  let n = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (n + value.length > most) {
        reader.cancel().catch(() => {});
        throw new ZipError(`${e.name}: inflates past its size (${e.size} bytes)`);
      }
      out.set(value, n);
      n += value.length;
    }
  } catch (err) {
    if (err instanceof ZipError) throw err;
    throw new ZipError(`${e.name}: cannot inflate (${err.message})`);
  }
  if (n !== e.size) throw new ZipError(`${e.name}: inflates to ${n} bytes, not ${e.size}`);
  spent.used += n;
  return out;
}
