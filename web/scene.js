// The WebGL 2 scene: the play space (4 lanes x 3 layers, 0.6 m apart), notes, bombs, walls,
// sabers with trails and the headset. Poses arrive in the game's (Unity's, left-handed,
// z forward) coordinates; the scene mirrors z to draw them right-handed.

const VS = `#version 300 es
in vec3 pos;
in vec3 nrm;
uniform mat4 mvp;
uniform mat4 model;
out vec3 vN;
void main() {
  vN = mat3(model) * nrm;
  gl_Position = mvp * vec4(pos, 1.0);
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

// ---- small matrix and quaternion helpers (column-major, as WebGL wants) ----

export function mul(a, b) {
  const o = new Float32Array(16);
  for (let c = 0; c < 4; c++) {
    for (let r = 0; r < 4; r++) {
      let s = 0;
      for (let k = 0; k < 4; k++) s += a[k * 4 + r] * b[c * 4 + k];
      o[c * 4 + r] = s;
    }
  }
  return o;
}

function perspective(fovy, aspect, near, far) {
  const f = 1 / Math.tan(fovy / 2);
  const o = new Float32Array(16);
  o[0] = f / aspect;
  o[5] = f;
  o[10] = (far + near) / (near - far);
  o[11] = -1;
  o[14] = (2 * far * near) / (near - far);
  return o;
}

// Model matrix from translation t, unit quaternion q and scale s.
export function trs(t, q, s) {
  const [x, y, z, w] = q;
  const [sx, sy, sz] = s;
  const o = new Float32Array(16);
  o[0] = (1 - 2 * (y * y + z * z)) * sx;
  o[1] = 2 * (x * y + z * w) * sx;
  o[2] = 2 * (x * z - y * w) * sx;
  o[4] = 2 * (x * y - z * w) * sy;
  o[5] = (1 - 2 * (x * x + z * z)) * sy;
  o[6] = 2 * (y * z + x * w) * sy;
  o[8] = 2 * (x * z + y * w) * sz;
  o[9] = 2 * (y * z - x * w) * sz;
  o[10] = (1 - 2 * (x * x + y * y)) * sz;
  o[12] = t[0];
  o[13] = t[1];
  o[14] = t[2];
  o[15] = 1;
  return o;
}

// The inverse of a rigid transform (rotation and translation only): a view matrix.
function rigidInverse(m) {
  const o = new Float32Array(16);
  for (let r = 0; r < 3; r++) for (let c = 0; c < 3; c++) o[c * 4 + r] = m[r * 4 + c];
  for (let r = 0; r < 3; r++) {
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

export function slerp(a, b, t) {
  let d = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
  const s = d < 0 ? -1 : 1;
  d *= s;
  if (d > 0.9995) {
    return normQuat(a.map((v, i) => v + (s * b[i] - v) * t));
  }
  const th = Math.acos(d);
  const k0 = Math.sin((1 - t) * th) / Math.sin(th);
  const k1 = (s * Math.sin(t * th)) / Math.sin(th);
  return a.map((v, i) => v * k0 + b[i] * k1);
}

function rotate(q, v) {
  const m = trs([0, 0, 0], q, [1, 1, 1]);
  return [
    m[0] * v[0] + m[4] * v[1] + m[8] * v[2],
    m[1] * v[0] + m[5] * v[1] + m[9] * v[2],
    m[2] * v[0] + m[6] * v[1] + m[10] * v[2],
  ];
}

function axisAngle(axis, a) {
  const s = Math.sin(a / 2);
  return [axis[0] * s, axis[1] * s, axis[2] * s, Math.cos(a / 2)];
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

export class Scene {
  constructor(canvas) {
    const gl = canvas.getContext("webgl2", { antialias: true, preserveDrawingBuffer: true });
    if (!gl) throw new Error("this browser has no WebGL 2");
    this.gl = gl;
    this.canvas = canvas;
    const prog = gl.createProgram();
    for (const [type, src] of [[gl.VERTEX_SHADER, VS], [gl.FRAGMENT_SHADER, FS]]) {
      const s = gl.createShader(type);
      gl.shaderSource(s, src);
      gl.compileShader(s);
      if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
      gl.attachShader(prog, s);
    }
    gl.bindAttribLocation(prog, 0, "pos");
    gl.bindAttribLocation(prog, 1, "nrm");
    gl.linkProgram(prog);
    if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(prog));
    this.prog = prog;
    this.u = {};
    for (const name of ["mvp", "model", "color", "lit"]) this.u[name] = gl.getUniformLocation(prog, name);
    this.meshes = {
      cube: this.mesh(cubeMesh()),
      sphere: this.mesh(sphereMesh()),
      arrow: this.mesh(arrowMesh()),
      dot: this.mesh(discMesh()),
    };
    this.trailVao = gl.createVertexArray();
    this.trailBuf = gl.createBuffer();
    gl.bindVertexArray(this.trailVao);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.trailBuf);
    gl.enableVertexAttribArray(0);
    gl.vertexAttribPointer(0, 3, gl.FLOAT, false, 0, 0);
    gl.vertexAttrib3f(1, 0, 1, 0);
    gl.bindVertexArray(null);
    this.eye = null;
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

  draw(mesh, model, color, alpha = 1, lit = 1) {
    const gl = this.gl;
    gl.uniformMatrix4fv(this.u.mvp, false, mul(this.vp, model));
    gl.uniformMatrix4fv(this.u.model, false, model);
    gl.uniform4f(this.u.color, color[0], color[1], color[2], alpha);
    gl.uniform1f(this.u.lit, lit);
    gl.bindVertexArray(mesh.vao);
    gl.drawArrays(gl.TRIANGLES, 0, mesh.count);
  }

  resize() {
    const c = this.canvas;
    const dpr = Math.min(window.devicePixelRatio || 1, 2);
    const w = Math.max(1, Math.round(c.clientWidth * dpr));
    const h = Math.max(1, Math.round(c.clientHeight * dpr));
    if (c.width !== w || c.height !== h) {
      c.width = w;
      c.height = h;
    }
  }

  // Where a scene point lands on the canvas, in CSS pixels (null behind the camera).
  project(p) {
    const m = this.vp;
    const x = m[0] * p[0] + m[4] * p[1] + m[8] * p[2] + m[12];
    const y = m[1] * p[0] + m[5] * p[1] + m[9] * p[2] + m[13];
    const w = m[3] * p[0] + m[7] * p[1] + m[11] * p[2] + m[15];
    if (w <= 0.05) return null;
    return [((x / w + 1) / 2) * this.canvas.clientWidth, ((1 - y / w) / 2) * this.canvas.clientHeight];
  }

  // Renders one view. `view`: {frame (Float32Array of 22 or null), camera, notes, walls,
  // bombs, effects, gridShift}.
  render(v) {
    const gl = this.gl;
    this.resize();
    gl.viewport(0, 0, this.canvas.width, this.canvas.height);
    gl.clearColor(0.035, 0.04, 0.07, 1);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.enable(gl.DEPTH_TEST);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA);
    gl.useProgram(this.prog);
    const proj = perspective((70 * Math.PI) / 180, this.canvas.width / this.canvas.height, 0.05, 200);
    this.vp = mul(proj, this.viewMatrix(v));

    // The play space: platform, lanes and the layers' marks.
    this.draw(this.meshes.cube, trs([0, -0.05, -0.5], [0, 0, 0, 1], [3, 0.1, 3]), [0.12, 0.13, 0.18]);
    for (let line = 0; line <= 4; line++) {
      const x = (line - 2) * 0.6;
      this.draw(this.meshes.cube, trs([x, 0.005, -25], [0, 0, 0, 1], [0.02, 0.01, 50]), [0.3, 0.35, 0.5], 1, 0);
    }
    const f = v.frame;
    if (f) this.drawPlayer(f, v.camera !== "first", v.history);
    for (const n of v.notes) this.drawNote(n);
    for (const w of v.walls) {
      this.draw(this.meshes.cube, trs(w.center, [0, 0, 0, 1], w.size), [0.9, 0.2, 0.3], 0.35);
    }
    for (const e of v.effects) this.drawEffect(e);
  }

  viewMatrix(v) {
    const f = v.frame;
    if (v.camera === "first" && f) {
      const p = gamePos(f[1], f[2], f[3]);
      const q = gameQuat(f[4], f[5], f[6], f[7]);
      if (!this.eye) this.eye = { p, q };
      const k = 0.15; // smoothing: each frame moves this much of the way
      this.eye.p = this.eye.p.map((x, i) => x + (p[i] - x) * k);
      this.eye.q = slerp(this.eye.q, q, k);
      return rigidInverse(trs(this.eye.p, this.eye.q, [1, 1, 1]));
    }
    this.eye = null;
    if (v.camera === "side") return lookAt([3.2, 1.7, -0.8], [0, 1.1, -1.8]);
    return lookAt([0, 2.0, 2.3], [0, 1.1, -3]);
  }

  // f: the frame shown; history: the frames just before it and f (records of 22), for the
  // sabers' trails.
  drawPlayer(f, headset, history) {
    const hands = [[8, RED], [15, BLUE]];
    hands.forEach(([o, color]) => {
      const p = gamePos(f[o], f[o + 1], f[o + 2]);
      const q = gameQuat(f[o + 3], f[o + 4], f[o + 5], f[o + 6]);
      // The blade runs 1 m along the controller's forward (-z in the scene's frame).
      this.draw(this.meshes.cube, trs(p, q, [0.035, 0.035, 0.2]), [0.25, 0.25, 0.28]);
      const mid = rotate(q, [0, 0, -0.5]).map((x, k) => x + p[k]);
      this.draw(this.meshes.cube, trs(mid, q, [0.025, 0.025, 1]), color, 1, 0.3);
      const t = [];
      for (let i = 0; i + 22 <= history.length; i += 22) {
        const h = history.subarray(i, i + 22);
        const hp = gamePos(h[o], h[o + 1], h[o + 2]);
        const hq = gameQuat(h[o + 3], h[o + 4], h[o + 5], h[o + 6]);
        const tip = rotate(hq, [0, 0, -1]).map((x, k) => x + hp[k]);
        const base = rotate(hq, [0, 0, -0.3]).map((x, k) => x + hp[k]);
        t.push([base, tip]);
      }
      this.drawTrail(t, color);
    });
    if (headset) {
      const p = gamePos(f[1], f[2], f[3]);
      const q = gameQuat(f[4], f[5], f[6], f[7]);
      this.draw(this.meshes.cube, trs(p, q, [0.19, 0.11, 0.12]), [0.85, 0.85, 0.9]);
      const visor = rotate(q, [0, 0, -0.065]).map((x, k) => x + p[k]);
      this.draw(this.meshes.cube, trs(visor, q, [0.17, 0.08, 0.02]), [0.05, 0.05, 0.08]);
    }
  }

  drawTrail(t, color) {
    if (t.length < 2) return;
    const gl = this.gl;
    const data = new Float32Array(t.length * 6);
    t.forEach(([b, tip], i) => data.set([...b, ...tip], i * 6));
    gl.bindBuffer(gl.ARRAY_BUFFER, this.trailBuf);
    gl.bufferData(gl.ARRAY_BUFFER, data, gl.STREAM_DRAW);
    gl.uniformMatrix4fv(this.u.mvp, false, this.vp);
    gl.uniformMatrix4fv(this.u.model, false, trs([0, 0, 0], [0, 0, 0, 1], [1, 1, 1]));
    gl.uniform4f(this.u.color, color[0], color[1], color[2], 0.3);
    gl.uniform1f(this.u.lit, 0);
    gl.depthMask(false);
    gl.bindVertexArray(this.trailVao);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, t.length * 2);
    gl.depthMask(true);
  }

  // n: {pos (scene), color (-1 bomb, 0 red, 1 blue), direction, alpha, chain}
  drawNote(n) {
    if (n.color < 0) {
      this.draw(this.meshes.sphere, trs(n.pos, [0, 0, 0, 1], [0.45, 0.45, 0.45]), [0.12, 0.12, 0.14], n.alpha);
      return;
    }
    const color = n.color === 0 ? RED : n.color === 1 ? BLUE : [0.7, 0.7, 0.7];
    const angle = DIRECTION_ANGLES[n.direction] ?? 0;
    const q = axisAngle([0, 0, 1], angle);
    const size = n.chain ? [0.5, 0.2, 0.5] : [0.5, 0.5, 0.5];
    this.draw(this.meshes.cube, trs(n.pos, q, size), color, n.alpha);
    const face = rotate(q, [0, 0, 0.252]).map((x, k) => x + n.pos[k]);
    const mark = n.direction >= 8 || n.chain ? this.meshes.dot : this.meshes.arrow;
    this.draw(mark, trs(face, q, [1.3, 1.3, 1]), [1, 1, 1], n.alpha, 0);
  }

  // e: {pos, color, age (0..1), kind: "cut"|"bad"|"bomb"|"miss", angle}
  drawEffect(e) {
    const a = 1 - e.age;
    if (e.kind === "bomb") {
      this.draw(this.meshes.sphere, trs(e.pos, [0, 0, 0, 1], [0.5 + e.age, 0.5 + e.age, 0.5 + e.age]), [1, 0.6, 0.2], a * 0.6, 0);
      return;
    }
    if (e.kind === "miss") return;
    const color = e.color === 0 ? RED : BLUE;
    const q = axisAngle([0, 0, 1], e.angle);
    const side = rotate(q, [0.12 + e.age * 0.5, 0, 0]);
    for (const s of [-1, 1]) {
      const p = e.pos.map((x, k) => x + side[k] * s + (k === 2 ? e.age * 1.5 : 0) - (k === 1 ? e.age * e.age : 0));
      this.draw(this.meshes.cube, trs(p, q, [0.24, 0.5, 0.5]), e.kind === "bad" ? [0.5, 0.5, 0.5] : color, a * 0.8);
    }
  }
}

// Rotation of a note (around the scene's z, counter-clockwise) that makes its arrow point
// the cut direction: 0 up, 1 down, 2 left, 3 right, 4 up-left, 5 up-right, 6 down-left,
// 7 down-right, 8 any (dot).
const DIRECTION_ANGLES = [0, Math.PI, Math.PI / 2, -Math.PI / 2, Math.PI / 4, -Math.PI / 4,
  (3 * Math.PI) / 4, (-3 * Math.PI) / 4, 0, 0];
