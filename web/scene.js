// The WebGL 2 scene: the play space (4 lanes x 3 layers, 0.6 m apart), notes, bombs, walls,
// sabers with trails and the headset. Poses arrive in the game's (Unity's, left-handed,
// z forward) coordinates; the scene mirrors z to draw them right-handed.
//
// Drawing a frame allocates nothing: matrices and vectors are scratch typed arrays filled
// in place, the view comes in as typed arrays (see `View`), the static play space's
// matrices are made once, and the projection-view matrix is uploaded once a frame (each
// draw uploads its model matrix, colour and lighting only). A garbage collection pause
// was one of the sources of the page's slow frames.

const VS = `#version 300 es
in vec3 pos;
in vec3 nrm;
uniform mat4 vp;
uniform mat4 model;
out vec3 vN;
void main() {
  vN = mat3(model) * nrm;
  gl_Position = vp * (model * vec4(pos, 1.0));
}`;

const FS = `#version 300 es
precision mediump float;
in vec3 vN;
uniform vec4 color;
uniform float lit;
out vec4 outColor;
void main() {
  float d = max(dot(normalize(vN), normalize(vec3(0.3, 0.8, 0.5))), 0.0);
  float l = mix(1.0, 0.45 + 0.65 * d, lit);
  outColor = vec4(color.rgb * l, color.a);
}`;

// ---- small matrix and quaternion helpers (column-major, as WebGL wants), in place ----

// o = a * b (o must not be a or b).
function mulInto(o, a, b) {
  for (let c = 0; c < 4; c++) {
    for (let r = 0; r < 4; r++) {
      let s = 0;
      for (let k = 0; k < 4; k++) s += a[k * 4 + r] * b[c * 4 + k];
      o[c * 4 + r] = s;
    }
  }
  return o;
}

export function mul(a, b) {
  return mulInto(new Float32Array(16), a, b);
}

function perspectiveInto(o, fovy, aspect, near, far) {
  const f = 1 / Math.tan(fovy / 2);
  o.fill(0);
  o[0] = f / aspect;
  o[5] = f;
  o[10] = (far + near) / (near - far);
  o[11] = -1;
  o[14] = (2 * far * near) / (near - far);
  return o;
}

// Model matrix from translation (tx, ty, tz), unit quaternion (x, y, z, w) and scale.
function trsInto(o, tx, ty, tz, x, y, z, w, sx, sy, sz) {
  o[0] = (1 - 2 * (y * y + z * z)) * sx;
  o[1] = 2 * (x * y + z * w) * sx;
  o[2] = 2 * (x * z - y * w) * sx;
  o[3] = 0;
  o[4] = 2 * (x * y - z * w) * sy;
  o[5] = (1 - 2 * (x * x + z * z)) * sy;
  o[6] = 2 * (y * z + x * w) * sy;
  o[7] = 0;
  o[8] = 2 * (x * z + y * w) * sz;
  o[9] = 2 * (y * z - x * w) * sz;
  o[10] = (1 - 2 * (x * x + y * y)) * sz;
  o[11] = 0;
  o[12] = tx;
  o[13] = ty;
  o[14] = tz;
  o[15] = 1;
  return o;
}

export function trs(t, q, s) {
  return trsInto(new Float32Array(16), t[0], t[1], t[2], q[0], q[1], q[2], q[3], s[0], s[1], s[2]);
}

// o = p + q v: the point at v in the frame at position p with rotation q (arrays of 3, 4).
function offsetInto(o, p, q, vx, vy, vz) {
  const x = q[0];
  const y = q[1];
  const z = q[2];
  const w = q[3];
  o[0] = p[0] + (1 - 2 * (y * y + z * z)) * vx + 2 * (x * y - z * w) * vy + 2 * (x * z + y * w) * vz;
  o[1] = p[1] + 2 * (x * y + z * w) * vx + (1 - 2 * (x * x + z * z)) * vy + 2 * (y * z - x * w) * vz;
  o[2] = p[2] + 2 * (x * z - y * w) * vx + 2 * (y * z + x * w) * vy + (1 - 2 * (x * x + y * y)) * vz;
  return o;
}

// The inverse of a rigid transform (rotation and translation only): a view matrix.
function rigidInverseInto(o, m) {
  for (let r = 0; r < 3; r++) for (let c = 0; c < 3; c++) o[c * 4 + r] = m[r * 4 + c];
  for (let r = 0; r < 3; r++) {
    o[r * 4 + 3] = 0;
    o[12 + r] = -(o[r] * m[12] + o[4 + r] * m[13] + o[8 + r] * m[14]);
  }
  o[15] = 1;
  return o;
}

function lookAt(eye, at) {
  const f = norm3([at[0] - eye[0], at[1] - eye[1], at[2] - eye[2]]);
  const s = norm3(cross(f, [0, 1, 0]));
  const u = cross(s, f);
  const o = new Float32Array(16);
  o[0] = s[0]; o[4] = s[1]; o[8] = s[2];
  o[1] = u[0]; o[5] = u[1]; o[9] = u[2];
  o[2] = -f[0]; o[6] = -f[1]; o[10] = -f[2];
  o[12] = -(s[0] * eye[0] + s[1] * eye[1] + s[2] * eye[2]);
  o[13] = -(u[0] * eye[0] + u[1] * eye[1] + u[2] * eye[2]);
  o[14] = f[0] * eye[0] + f[1] * eye[1] + f[2] * eye[2];
  o[15] = 1;
  return o;
}

function cross(a, b) {
  return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
}

function norm3(v) {
  const l = Math.hypot(v[0], v[1], v[2]) || 1;
  return [v[0] / l, v[1] / l, v[2] / l];
}

export function normQuat(q) {
  const l = Math.hypot(q[0], q[1], q[2], q[3]);
  return l > 1e-6 && Number.isFinite(l) ? [q[0] / l, q[1] / l, q[2] / l, q[3] / l] : [0, 0, 0, 1];
}

// Game (left-handed) pose to scene (right-handed): mirror z.
export function gamePos(x, y, z) {
  return [x, y, -z];
}

export function gameQuat(x, y, z, w) {
  return normQuat([-x, -y, z, w]);
}

// The pose of record f[o..o+7] (position, then rotation) into p (3) and q (4), in the
// scene's coordinates; a rotation that is not a unit quaternion becomes the identity.
function poseInto(p, q, f, o) {
  p[0] = f[o];
  p[1] = f[o + 1];
  p[2] = -f[o + 2];
  const x = -f[o + 3];
  const y = -f[o + 4];
  const z = f[o + 5];
  const w = f[o + 6];
  const l = Math.sqrt(x * x + y * y + z * z + w * w);
  if (l > 1e-6 && Number.isFinite(l)) {
    q[0] = x / l;
    q[1] = y / l;
    q[2] = z / l;
    q[3] = w / l;
  } else {
    q[0] = 0;
    q[1] = 0;
    q[2] = 0;
    q[3] = 1;
  }
}

// a = slerp(a, b, t), in place (a, b unit quaternions).
function slerpInPlace(a, b, t) {
  let d = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
  const s = d < 0 ? -1 : 1;
  d *= s;
  let k0;
  let k1;
  if (d > 0.9995) {
    k0 = 1 - t;
    k1 = s * t;
  } else {
    const th = Math.acos(d);
    k0 = Math.sin((1 - t) * th) / Math.sin(th);
    k1 = (s * Math.sin(t * th)) / Math.sin(th);
  }
  let l = 0;
  for (let i = 0; i < 4; i++) {
    a[i] = a[i] * k0 + b[i] * k1;
    l += a[i] * a[i];
  }
  l = Math.sqrt(l);
  if (l > 1e-6 && Number.isFinite(l)) for (let i = 0; i < 4; i++) a[i] /= l;
  else a.set(b);
}

export function slerp(a, b, t) {
  const o = Float64Array.from(a);
  slerpInPlace(o, b, t);
  return Array.from(o);
}

// ---- meshes ----

function cubeMesh() {
  const p = [];
  const n = [];
  const faces = [
    [[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[-1, 0, 0], [0, 0, 1], [0, 1, 0]],
    [[0, 1, 0], [0, 0, 1], [1, 0, 0]], [[0, -1, 0], [1, 0, 0], [0, 0, 1]],
    [[0, 0, 1], [1, 0, 0], [0, 1, 0]], [[0, 0, -1], [0, 1, 0], [1, 0, 0]],
  ];
  for (const [nn, u, v] of faces) {
    const c = nn.map((x) => x * 0.5);
    const corner = (a, b) => c.map((x, i) => x + (u[i] * a + v[i] * b) * 0.5);
    for (const [a, b] of [[-1, -1], [1, -1], [1, 1], [-1, -1], [1, 1], [-1, 1]]) {
      p.push(...corner(a, b));
      n.push(...nn);
    }
  }
  return { p, n };
}

function sphereMesh(seg = 12) {
  const p = [];
  const n = [];
  const at = (i, j) => {
    const th = (i / seg) * Math.PI;
    const ph = (j / seg) * 2 * Math.PI;
    return [Math.sin(th) * Math.cos(ph), Math.cos(th), Math.sin(th) * Math.sin(ph)];
  };
  for (let i = 0; i < seg; i++) {
    for (let j = 0; j < seg; j++) {
      const q = [at(i, j), at(i + 1, j), at(i + 1, j + 1), at(i, j), at(i + 1, j + 1), at(i, j + 1)];
      for (const v of q) {
        p.push(...v.map((x) => x * 0.5));
        n.push(...v);
      }
    }
  }
  return { p, n };
}

// A chevron pointing up (+y) in the xy plane, facing +z.
function arrowMesh() {
  const p = [-0.18, -0.02, 0, 0.18, -0.02, 0, 0, 0.14, 0];
  return { p, n: [0, 0, 1, 0, 0, 1, 0, 0, 1] };
}

function discMesh(seg = 16) {
  const p = [];
  const n = [];
  for (let i = 0; i < seg; i++) {
    const a = (i / seg) * 2 * Math.PI;
    const b = ((i + 1) / seg) * 2 * Math.PI;
    p.push(0, 0, 0, Math.cos(a) * 0.08, Math.sin(a) * 0.08, 0, Math.cos(b) * 0.08, Math.sin(b) * 0.08, 0);
    n.push(0, 0, 1, 0, 0, 1, 0, 0, 1);
  }
  return { p, n };
}

export const RED = [0.9, 0.15, 0.15];
export const BLUE = [0.15, 0.45, 0.95];
const GREY = [0.7, 0.7, 0.7];
const WHITE = [1, 1, 1];
const FLOOR = [0.12, 0.13, 0.18];
const LANE = [0.3, 0.35, 0.5];
const WALL = [0.9, 0.2, 0.3];
const HANDLE = [0.25, 0.25, 0.28];
// Bombs: a light steel grey with a dark core mark, readable on the dark stage.
const BOMB = [0.58, 0.6, 0.66];
const BOMB_CORE = [0.08, 0.08, 0.1];
const BLAST = [1, 0.6, 0.2];
const BAD = [0.5, 0.5, 0.5];
const HEADSET = [0.85, 0.85, 0.9];
const VISOR = [0.05, 0.05, 0.08];
const IDENTITY = new Float32Array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);

// The most frames a saber's trail is drawn from (main.js gives at most 13).
const TRAIL_MAX = 16;

// What the page shows in one frame, in typed arrays the page refills each frame:
//   data, at, from, stride: the decoded frames (records of `stride` floats, the module's
//     layout: time, then head, left and right hand, each x, y, z, qx, qy, qz, qw), the
//     shown frame's offset in data (or -1 for none) and the first trail frame's offset
//     (history: from..at);
//   notes: records of NOTE (x, y, z in the scene, color: -1 bomb, 0 red, 1 blue, cut
//     direction, alpha, chain 0/1, yaw), nNotes of them;
//   walls: records of WALL_SIZE (center x, y, z, size x, y, z, yaw), nWalls;
//   beads: records of 4 (x, y, z, color), nBeads: points along the map's arcs;
//   effects: records of EFFECT (x, y, z, color, age 0..1, kind: 0 cut, 1 bad cut, 2 bomb,
//     3 miss), nEffects;
//   camera: "first" | "behind" | "side".
export const NOTE = 8;
export const WALL_SIZE = 7;
export const EFFECT = 9;
export class View {
  constructor(max = 256) {
    this.max = max;
    this.data = null;
    this.at = -1;
    this.from = -1;
    this.stride = 0;
    this.camera = "behind";
    this.notes = new Float32Array(max * NOTE);
    this.walls = new Float32Array(max * WALL_SIZE);
    this.effects = new Float32Array(max * EFFECT);
    this.nNotes = 0;
    this.nWalls = 0;
    this.nEffects = 0;
    this.beads = new Float32Array(max * 4 * 4);
    this.nBeads = 0;
  }

  clear() {
    this.nNotes = 0;
    this.nWalls = 0;
    this.nEffects = 0;
    this.nBeads = 0;
  }

  // A bead of an arc at (x, y, z), colour 0 red, 1 blue.
  bead(x, y, z, color) {
    if (this.nBeads >= this.max * 4) return false;
    const o = this.nBeads++ * 4;
    const a = this.beads;
    a[o] = x; a[o + 1] = y; a[o + 2] = z; a[o + 3] = color;
    return true;
  }

  // Each add returns false when the view is full (the rest is not drawn).
  // yaw: a turn about the vertical axis (radians, counter-clockwise seen from above in the
  // scene's axes), for a 90/360-degree map's lanes.
  note(x, y, z, color, direction, alpha, chain, yaw = 0) {
    if (this.nNotes >= this.max) return false;
    const o = this.nNotes++ * NOTE;
    const a = this.notes;
    a[o] = x; a[o + 1] = y; a[o + 2] = z; a[o + 3] = color; a[o + 4] = direction;
    a[o + 5] = alpha; a[o + 6] = chain ? 1 : 0; a[o + 7] = yaw;
    return true;
  }

  wall(x, y, z, sx, sy, sz, yaw = 0) {
    if (this.nWalls >= this.max) return false;
    const o = this.nWalls++ * WALL_SIZE;
    const a = this.walls;
    a[o] = x; a[o + 1] = y; a[o + 2] = z; a[o + 3] = sx; a[o + 4] = sy; a[o + 5] = sz; a[o + 6] = yaw;
    return true;
  }

  // (nx, ny, nz): the cut plane's normal in the scene (0, 0, 0: none recorded).
  effect(x, y, z, color, age, kind, nx = 0, ny = 0, nz = 0) {
    if (this.nEffects >= this.max) return false;
    const o = this.nEffects++ * EFFECT;
    const a = this.effects;
    a[o] = x; a[o + 1] = y; a[o + 2] = z; a[o + 3] = color; a[o + 4] = age; a[o + 5] = kind;
    a[o + 6] = nx; a[o + 7] = ny; a[o + 8] = nz;
    return true;
  }
}

export class Scene {
  constructor(canvas) {
    // The canvas is given its size before its context, so that the drawing buffer is made
    // once, at that size: made at the default 300x150 and then resized, the second
    // allocation held the page's thread 20-80 ms longer on the way to the first frame
    // (SwiftShader, under load). The size in CSS pixels is then kept by an observer: reading
    // clientWidth in a frame would make the browser lay the page out there and then.
    this.canvas = canvas;
    this.cssW = canvas.clientWidth;
    this.cssH = canvas.clientHeight;
    this.resize();
    // No multisampling in the canvas's own buffer: where WebGL runs in software (SwiftShader)
    // a context with it takes longer to make, on the way to the first frame; frames after
    // the first draw into a multisampled framebuffer instead (`smooth`). The drawing buffer
    // is kept between frames so that what is on screen can be read back (the tests do, in
    // frames the page does not draw at half rate).
    const gl = canvas.getContext("webgl2", { antialias: false, preserveDrawingBuffer: true });
    if (!gl) throw new Error("this browser has no WebGL 2");
    this.gl = gl;
    const prog = gl.createProgram();
    for (const [type, src] of [[gl.VERTEX_SHADER, VS], [gl.FRAGMENT_SHADER, FS]]) {
      const s = gl.createShader(type);
      gl.shaderSource(s, src);
      gl.compileShader(s);
      gl.attachShader(prog, s);
      this.shaders = [...(this.shaders || []), s];
    }
    gl.bindAttribLocation(prog, 0, "pos");
    gl.bindAttribLocation(prog, 1, "nrm");
    gl.linkProgram(prog);
    // The link's status is asked for once the compiler is done (`ready`, polled by the
    // page while it waits for data; asking earlier would wait for the compiler), or at the
    // first frame.
    this.prog = prog;
    this.linked = false;
    this.drawn = 0; // frames rendered
    this.samples = null; // samples per pixel of frames after the first (0: none), once known
    this.msaa = null;
    this.smoothError = null; // the GL error after the first multisampled frame (0: none)
    this.parallel = gl.getExtension("KHR_parallel_shader_compile");
    this.meshes = {
      cube: this.mesh(cubeMesh()),
      sphere: this.mesh(sphereMesh()),
      arrow: this.mesh(arrowMesh()),
      dot: this.mesh(discMesh()),
    };
    this.trailData = new Float32Array(TRAIL_MAX * 6);
    this.trailVao = gl.createVertexArray();
    this.trailBuf = gl.createBuffer();
    gl.bindVertexArray(this.trailVao);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.trailBuf);
    gl.bufferData(gl.ARRAY_BUFFER, this.trailData.byteLength, gl.STREAM_DRAW);
    gl.enableVertexAttribArray(0);
    gl.vertexAttribPointer(0, 3, gl.FLOAT, false, 0, 0);
    gl.vertexAttrib3f(1, 0, 1, 0);
    gl.bindVertexArray(null);

    // Scratch space: nothing below allocates per frame.
    this.proj = new Float32Array(16);
    this.view = new Float32Array(16);
    this.vp = new Float32Array(16);
    this.model = new Float32Array(16);
    this.eyeM = new Float32Array(16);
    this.p = new Float64Array(3);
    this.q = new Float64Array(4);
    this.hp = new Float64Array(3);
    this.hq = new Float64Array(4);
    this.v3 = new Float64Array(3);
    this.eyeP = new Float64Array(3);
    this.eyeQ = new Float64Array(4);
    this.eyeSet = false;
    this.cameras = {
      side: lookAt([3.2, 1.7, -0.8], [0, 1.1, -1.8]),
      behind: lookAt([0, 2.0, 2.3], [0, 1.1, -3]),
    };
    // The play space: platform, and the lanes' edges.
    this.floor = [trs([0, -0.05, -0.5], [0, 0, 0, 1], [3, 0.1, 3])];
    for (let line = 0; line <= 4; line++) {
      this.floor.push(trs([(line - 2) * 0.6, 0.005, -25], [0, 0, 0, 1], [0.02, 0.01, 50]));
    }
    if (typeof ResizeObserver === "function") {
      new ResizeObserver((entries) => {
        const r = entries[entries.length - 1].contentRect;
        this.cssW = r.width;
        this.cssH = r.height;
      }).observe(canvas);
    }
  }

  mesh({ p, n }) {
    const gl = this.gl;
    const vao = gl.createVertexArray();
    gl.bindVertexArray(vao);
    for (const [loc, data] of [[0, p], [1, n]]) {
      const b = gl.createBuffer();
      gl.bindBuffer(gl.ARRAY_BUFFER, b);
      gl.bufferData(gl.ARRAY_BUFFER, new Float32Array(data), gl.STATIC_DRAW);
      gl.enableVertexAttribArray(loc);
      gl.vertexAttribPointer(loc, 3, gl.FLOAT, false, 0, 0);
    }
    gl.bindVertexArray(null);
    return { vao, count: p.length / 3 };
  }

  // Draws a mesh with model matrix m.
  draw(mesh, m, color, alpha = 1, lit = 1) {
    const gl = this.gl;
    gl.uniformMatrix4fv(this.u.model, false, m);
    gl.uniform4f(this.u.color, color[0], color[1], color[2], alpha);
    gl.uniform1f(this.u.lit, lit);
    gl.bindVertexArray(mesh.vao);
    gl.drawArrays(gl.TRIANGLES, 0, mesh.count);
  }

  // Draws a mesh at position p (3), rotation q (4), scale (sx, sy, sz).
  drawAt(mesh, p, q, sx, sy, sz, color, alpha = 1, lit = 1) {
    trsInto(this.model, p[0], p[1], p[2], q[0], q[1], q[2], q[3], sx, sy, sz);
    this.draw(mesh, this.model, color, alpha, lit);
  }

  resize() {
    const c = this.canvas;
    const dpr = Math.min(window.devicePixelRatio || 1, 2);
    const w = Math.max(1, Math.round(this.cssW * dpr));
    const h = Math.max(1, Math.round(this.cssH * dpr));
    if (c.width !== w || c.height !== h) {
      c.width = w;
      c.height = h;
    }
  }

  // The multisampled framebuffer frames are drawn into and then resolved to the canvas,
  // made (again) at the canvas's size; null where the context offers no multisampling.
  smooth() {
    const gl = this.gl;
    const w = this.canvas.width;
    const h = this.canvas.height;
    if (this.msaa && this.msaa.w === w && this.msaa.h === h) return this.msaa;
    if (this.samples === 0) return null; // tried: none
    const samples = Math.min(4, gl.getParameter(gl.MAX_SAMPLES) || 0);
    if (samples < 2) {
      this.samples = 0;
      return null;
    }
    if (this.msaa) {
      gl.deleteFramebuffer(this.msaa.fb);
      for (const rb of this.msaa.rbs) gl.deleteRenderbuffer(rb);
    }
    const fb = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
    const rbs = [[gl.RGBA8, gl.COLOR_ATTACHMENT0], [gl.DEPTH_COMPONENT24, gl.DEPTH_ATTACHMENT]].map(([format, at]) => {
      const rb = gl.createRenderbuffer();
      gl.bindRenderbuffer(gl.RENDERBUFFER, rb);
      gl.renderbufferStorageMultisample(gl.RENDERBUFFER, samples, format, w, h);
      gl.framebufferRenderbuffer(gl.FRAMEBUFFER, at, gl.RENDERBUFFER, rb);
      return rb;
    });
    const complete = gl.checkFramebufferStatus(gl.FRAMEBUFFER) === gl.FRAMEBUFFER_COMPLETE;
    gl.bindFramebuffer(gl.FRAMEBUFFER, null);
    this.msaa = complete ? { fb, rbs, w, h } : null;
    this.samples = complete ? samples : 0;
    return this.msaa;
  }

  // Where scene point (x, y, z) lands on the canvas, in CSS pixels, into out (2); false
  // when it is behind the camera.
  project(x, y, z, out) {
    const m = this.vp;
    const px = m[0] * x + m[4] * y + m[8] * z + m[12];
    const py = m[1] * x + m[5] * y + m[9] * z + m[13];
    const w = m[3] * x + m[7] * y + m[11] * z + m[15];
    if (w <= 0.05) return false;
    out[0] = ((px / w + 1) / 2) * this.cssW;
    out[1] = ((1 - py / w) / 2) * this.cssH;
    return true;
  }

  // True once the shaders are compiled and linked (without waiting for them where the
  // browser can say).
  ready() {
    if (this.linked) return true;
    const done = this.parallel
      ? this.gl.getProgramParameter(this.prog, this.parallel.COMPLETION_STATUS_KHR) : true;
    if (done) this.checkProgram();
    return this.linked;
  }

  checkProgram() {
    const gl = this.gl;
    if (!gl.getProgramParameter(this.prog, gl.LINK_STATUS)) {
      const log = this.shaders.map((s) => gl.getShaderInfoLog(s)).join(" ");
      throw new Error(`${gl.getProgramInfoLog(this.prog)} ${log}`.trim());
    }
    this.u = {};
    for (const name of ["vp", "model", "color", "lit"]) this.u[name] = gl.getUniformLocation(this.prog, name);
    this.linked = true;
  }

  // Renders one view (a View).
  render(v) {
    const gl = this.gl;
    if (!this.linked) this.checkProgram();
    this.resize();
    // The first frame straight into the canvas (its multisampled buffers would add their
    // allocation to it), the next ones multisampled.
    const msaa = this.drawn > 0 ? this.smooth() : null;
    this.drawn++;
    gl.bindFramebuffer(gl.FRAMEBUFFER, msaa ? msaa.fb : null);
    gl.viewport(0, 0, this.canvas.width, this.canvas.height);
    gl.clearColor(0.035, 0.04, 0.07, 1);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.enable(gl.DEPTH_TEST);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA);
    gl.useProgram(this.prog);
    perspectiveInto(this.proj, (70 * Math.PI) / 180, this.canvas.width / this.canvas.height, 0.05, 200);
    mulInto(this.vp, this.proj, this.viewMatrix(v));
    gl.uniformMatrix4fv(this.u.vp, false, this.vp);

    this.draw(this.meshes.cube, this.floor[0], FLOOR);
    for (let k = 1; k < this.floor.length; k++) this.draw(this.meshes.cube, this.floor[k], LANE, 1, 0);
    if (v.data && v.at >= 0) this.drawPlayer(v.data, v.at, v.from, v.stride, v.camera !== "first");
    const n = v.notes;
    for (let k = 0; k < v.nNotes; k++) {
      const o = k * NOTE;
      this.drawNote(n[o], n[o + 1], n[o + 2], n[o + 3], n[o + 4], n[o + 5], n[o + 6] !== 0, n[o + 7]);
    }
    const w = v.walls;
    for (let k = 0; k < v.nWalls; k++) {
      const o = k * WALL_SIZE;
      const h = w[o + 6] / 2;
      trsInto(this.model, w[o], w[o + 1], w[o + 2], 0, Math.sin(h), 0, Math.cos(h), w[o + 3], w[o + 4], w[o + 5]);
      this.draw(this.meshes.cube, this.model, WALL, 0.35);
    }
    const b = v.beads;
    for (let k = 0; k < (v.nBeads || 0); k++) {
      const o = k * 4;
      trsInto(this.model, b[o], b[o + 1], b[o + 2], 0, 0, 0, 1, 0.07, 0.07, 0.07);
      this.draw(this.meshes.sphere, this.model, b[o + 3] === 0 ? RED : BLUE, 0.8, 0);
    }
    const e = v.effects;
    for (let k = 0; k < v.nEffects; k++) {
      const o = k * EFFECT;
      this.drawEffect(e[o], e[o + 1], e[o + 2], e[o + 3], e[o + 4], e[o + 5], e[o + 6], e[o + 7], e[o + 8]);
    }
    if (msaa) {
      // Resolved into the canvas's buffer.
      gl.bindFramebuffer(gl.READ_FRAMEBUFFER, msaa.fb);
      gl.bindFramebuffer(gl.DRAW_FRAMEBUFFER, null);
      // (Same size and format, RGBA8, as a multisampled blit requires.)
      gl.blitFramebuffer(0, 0, msaa.w, msaa.h, 0, 0, msaa.w, msaa.h, gl.COLOR_BUFFER_BIT, gl.NEAREST);
      gl.bindFramebuffer(gl.FRAMEBUFFER, null);
      // The first multisampled frame's GL error, asked once (the call waits for the GPU).
      if (this.smoothError === null) this.smoothError = gl.getError();
    }
  }

  viewMatrix(v) {
    if (v.camera === "first" && v.data && v.at >= 0) {
      const p = this.p;
      const q = this.q;
      poseInto(p, q, v.data, v.at + 1);
      if (!this.eyeSet) {
        this.eyeP.set(p);
        this.eyeQ.set(q);
        this.eyeSet = true;
      }
      const k = 0.15; // smoothing: each frame moves this much of the way
      for (let i = 0; i < 3; i++) this.eyeP[i] += (p[i] - this.eyeP[i]) * k;
      slerpInPlace(this.eyeQ, q, k);
      const e = this.eyeP;
      const r = this.eyeQ;
      trsInto(this.eyeM, e[0], e[1], e[2], r[0], r[1], r[2], r[3], 1, 1, 1);
      return rigidInverseInto(this.view, this.eyeM);
    }
    this.eyeSet = false;
    return v.camera === "side" ? this.cameras.side : this.cameras.behind;
  }

  // The frame at offset `at` of data, with the frames from offset `from` to it (records of
  // `stride` floats) for the sabers' trails.
  drawPlayer(f, at, from, stride, headset) {
    const p = this.p;
    const q = this.q;
    const hp = this.hp;
    const hq = this.hq;
    const v3 = this.v3;
    for (let hand = 0; hand < 2; hand++) {
      const o = hand === 0 ? 8 : 15;
      const color = hand === 0 ? RED : BLUE;
      poseInto(p, q, f, at + o);
      // The blade runs 1 m along the controller's forward (-z in the scene's frame).
      this.drawAt(this.meshes.cube, p, q, 0.035, 0.035, 0.2, HANDLE);
      offsetInto(v3, p, q, 0, 0, -0.5);
      this.drawAt(this.meshes.cube, v3, q, 0.025, 0.025, 1, color, 1, 0.3);
      const t = this.trailData;
      let n = 0;
      for (let i = Math.max(from, at - (TRAIL_MAX - 1) * stride); i <= at; i += stride) {
        poseInto(hp, hq, f, i + o);
        offsetInto(v3, hp, hq, 0, 0, -0.3);
        t[n * 6] = v3[0];
        t[n * 6 + 1] = v3[1];
        t[n * 6 + 2] = v3[2];
        offsetInto(v3, hp, hq, 0, 0, -1);
        t[n * 6 + 3] = v3[0];
        t[n * 6 + 4] = v3[1];
        t[n * 6 + 5] = v3[2];
        n++;
      }
      this.drawTrail(n, color);
    }
    if (headset) {
      poseInto(p, q, f, at + 1);
      this.drawAt(this.meshes.cube, p, q, 0.19, 0.11, 0.12, HEADSET);
      offsetInto(v3, p, q, 0, 0, -0.065);
      this.drawAt(this.meshes.cube, v3, q, 0.17, 0.08, 0.02, VISOR);
    }
  }

  // A trail of n base-and-tip pairs in this.trailData.
  drawTrail(n, color) {
    if (n < 2) return;
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.trailBuf);
    gl.bufferSubData(gl.ARRAY_BUFFER, 0, this.trailData, 0, n * 6);
    gl.uniformMatrix4fv(this.u.model, false, IDENTITY);
    gl.uniform4f(this.u.color, color[0], color[1], color[2], 0.3);
    gl.uniform1f(this.u.lit, 0);
    gl.depthMask(false);
    gl.bindVertexArray(this.trailVao);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, n * 2);
    gl.depthMask(true);
  }

  // A note at (x, y, z): color -1 bomb, 0 red, 1 blue; its cut direction; alpha; chain; yaw
  // (its lane's turn about the vertical axis).
  drawNote(x, y, z, color, direction, alpha, chain, yaw = 0) {
    const m = this.model;
    // The face towards the player (+z), turned with the lane.
    const fx = Math.sin(yaw);
    const fz = Math.cos(yaw);
    const ys = Math.sin(yaw / 2);
    const yc = Math.cos(yaw / 2);
    if (color < 0) {
      trsInto(m, x, y, z, 0, ys, 0, yc, 0.45, 0.45, 0.45);
      this.draw(this.meshes.sphere, m, BOMB, alpha);
      trsInto(m, x + 0.2 * fx, y, z + 0.2 * fz, 0, ys, 0, yc, 0.16, 0.16, 0.1);
      this.draw(this.meshes.sphere, m, BOMB_CORE, alpha, 0);
      return;
    }
    const c = color === 0 ? RED : color === 1 ? BLUE : GREY;
    const angle = DIRECTION_ANGLES[direction] ?? 0;
    const sz = Math.sin(angle / 2);
    const cz = Math.cos(angle / 2);
    // The yaw after the turn about z: q = q_yaw · q_z.
    const qx = ys * sz;
    const qy = ys * cz;
    const qz = yc * sz;
    const qw = yc * cz;
    trsInto(m, x, y, z, qx, qy, qz, qw, 0.5, chain ? 0.2 : 0.5, 0.5);
    this.draw(this.meshes.cube, m, c, alpha);
    // The mark on the face (+z; a rotation about z keeps it there).
    const mark = direction >= 8 || chain ? this.meshes.dot : this.meshes.arrow;
    trsInto(m, x + 0.252 * fx, y, z + 0.252 * fz, qx, qy, qz, qw, 1.3, 1.3, 1);
    this.draw(mark, m, WHITE, alpha, 0);
  }

  // An effect at (x, y, z): color, age (0..1), kind (0 cut, 1 bad cut, 2 bomb, 3 miss), and
  // for a cut the cut plane's normal (nx, ny, nz).
  drawEffect(x, y, z, color, age, kind, nx, ny, nz) {
    const a = 1 - age;
    const m = this.model;
    if (kind === 2) {
      const s = 0.5 + age;
      trsInto(m, x, y, z, 0, 0, 0, 1, s, s, s);
      this.draw(this.meshes.sphere, m, BLAST, a * 0.6, 0);
      return;
    }
    if (kind === 3) return;
    const c = kind === 1 ? BAD : color === 0 ? RED : BLUE;
    // The two halves of the note, split along the cut plane: each a slab on its side of the
    // plane (its thin axis the normal), moving apart along the normal, falling a little,
    // shrinking and fading. Without a normal, a vertical cut.
    let len = Math.hypot(nx, ny, nz);
    if (!(len > 0.1)) { nx = 1; ny = 0; nz = 0; len = 1; }
    nx /= len; ny /= len; nz /= len;
    // The rotation that takes the slab's x axis to the normal.
    let qx = 0;
    let qy = -nz;
    let qz = ny;
    let qw = 1 + nx;
    const ql = Math.hypot(qx, qy, qz, qw);
    if (ql < 1e-4) { qx = 0; qy = 0; qz = 1; qw = 0; } else { qx /= ql; qy /= ql; qz /= ql; qw /= ql; }
    const apart = 0.12 + age * 0.45;
    const size = 0.46 * (1 - 0.5 * age);
    for (let s = -1; s <= 1; s += 2) {
      trsInto(m, x + nx * apart * s, y + ny * apart * s - 0.6 * age * age, z + nz * apart * s,
        qx, qy, qz, qw, 0.2 * (1 - 0.5 * age), size, size);
      this.draw(this.meshes.cube, m, c, a * 0.85);
    }
  }
}

// Rotation of a note (around the scene's z, counter-clockwise) that makes its arrow point
// the cut direction: 0 up, 1 down, 2 left, 3 right, 4 up-left, 5 up-right, 6 down-left,
// 7 down-right, 8 any (dot).
const DIRECTION_ANGLES = [0, Math.PI, Math.PI / 2, -Math.PI / 2, Math.PI / 4, -Math.PI / 4,
  (3 * Math.PI) / 4, (-3 * Math.PI) / 4, 0, 0];
