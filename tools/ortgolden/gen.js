#!/usr/bin/env node
'use strict';
// Writes the ONNX Runtime golden cases under tests/testdata/ort.
//
//   node tools/ortgolden/gen.js --oracle <oracle-dir> --out <dir> [--force] [--only SUBSTR]
//
// <oracle-dir> is a writable copy of tools/oracle with `npm ci --ignore-scripts` done.
// Every case is one folder in the oracle's case format (case.json + in.<name>.bin); once all
// are written, the oracle's `ort.js --all` runs ONNX Runtime on them and adds out.<name>.bin,
// "outputs", "error" and "ort" to each case.json. Inputs come from a seeded PRNG keyed by the
// case name, so adding or removing a case never changes the data of another.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

// ------------------------------------------------------------------ arguments
function parseArgs(argv) {
  const o = { oracle: null, out: null, force: false, only: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--oracle') o.oracle = argv[++i];
    else if (a === '--out') o.out = argv[++i];
    else if (a === '--force') o.force = true;
    else if (a === '--only') o.only = argv[++i];
    else throw new Error('unknown argument ' + a);
  }
  if (!o.oracle || !o.out) {
    process.stderr.write('usage: node gen.js --oracle <oracle-dir> --out <dir> [--force] [--only SUBSTR]\n');
    process.exit(2);
  }
  return o;
}

// ------------------------------------------------------------------ PRNG
// FNV-1a of the case name seeds a xorshift-multiply generator (32-bit state steps).
function seedOf(name) {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

function makeRng(seed) {
  let s = seed >>> 0;
  const u32 = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return (z ^ (z >>> 14)) >>> 0;
  };
  const unit = () => u32() / 4294967296; // [0, 1)
  return {
    uniform: (lo, hi) => lo + (hi - lo) * unit(),
    int: (lo, hi) => lo + Math.floor(unit() * (hi - lo + 1)), // inclusive bounds
    sign: () => (u32() & 1 ? -1 : 1),
  };
}

// ------------------------------------------------------------------ float16
const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

// Round a number to binary16 (nearest-even) and return its bits. The value is first rounded to
// binary32, which is harmless: binary32 keeps more than twice binary16's precision.
function toF16Bits(v) {
  f32buf[0] = v;
  const x = u32buf[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const frac = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (frac ? 0x200 : 0);
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = frac | 0x800000;
    const shift = 14 - e;
    let h = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rest > half || (rest === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (frac >>> 13);
  const rest = frac & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return sign | h;
}

// ------------------------------------------------------------------ case writing
const ELEM = { float32: Float32Array, float16: Uint16Array, int32: Int32Array };

// A tensor description before it is written: dtype, shape, and plain numbers (values for
// float types; they are rounded to the dtype when written).
function tensor(dtype, shape, values) {
  const n = shape.reduce((a, b) => a * b, 1);
  if (values.length !== n) throw new Error(`tensor ${JSON.stringify(shape)} given ${values.length} values`);
  return { dtype, shape, values };
}

function encode(t) {
  const arr = new ELEM[t.dtype](t.values.length);
  for (let i = 0; i < t.values.length; i++) arr[i] = t.dtype === 'float16' ? toF16Bits(t.values[i]) : t.values[i];
  return Buffer.from(arr.buffer);
}

const ELN_ORDER = ['input_ids', 'segment_ids', 'word_embedding', 'position_embedding', 'segment_embedding', 'gamma', 'beta', 'mask', 'position_ids'];
const SLN_ORDER = ['input', 'skip', 'gamma', 'beta', 'bias'];

function writeCase(root, c) {
  const dir = path.join(root, c.name);
  fs.mkdirSync(dir, { recursive: true });
  const order = c.op === 'EmbedLayerNormalization' ? ELN_ORDER : SLN_ORDER;
  const inputs = [];
  for (const name of order) {
    const t = c.inputs[name];
    if (!t) continue;
    const file = `in.${name}.bin`;
    fs.writeFileSync(path.join(dir, file), encode(t));
    inputs.push({ name, dtype: t.dtype, shape: t.shape, file });
  }
  for (const name of Object.keys(c.inputs)) if (!order.includes(name)) throw new Error(`${c.name}: unknown input ${name}`);
  const json = { format: 1, name: c.name, op: c.op, dtype: c.dtype, attrs: c.attrs, want: c.want, inputs };
  if (c.note) json.note = c.note;
  fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify(json, null, 1) + '\n');
}

// ------------------------------------------------------------------ EmbedLayerNormalization
const ELN_EPS = 1e-12;

// spec §A.6 tables.
const A6 = {
  V: 6, P: 3, G: 2, H: 4,
  word: [0.2, 0.1, 0.4, -0.6, 0.3, 0.2, 0.5, 0.6, 0.6, 0.7, 0.0, -0.1, 0.8, 0.6, 0.9, 1.2, 0.1, 0.3, 0.5, 0.9, 1.0, -2.0, 1.1, 0.8],
  pos: [0.1, 0.1, 0.4, 0.6, 0.6, 0.0, 0.8, 0.6, 0.3, 0.9, -2.0, 0.8],
  seg: [0.3, 0.4, 0.9, 0.1, 0.7, 0.3, 0.5, 0.2],
  gamma: [0.25, 0.15, 0.45, -0.66],
  beta: [0.6, 0.2, 0.5, -0.6],
};

// ELN case from plain arrays. spec: { B, S, ids, segIds?, mask?, posIds?, posIdsB? (first dim), tables }
function elnCase(name, dtype, s, opts = {}) {
  const T = dtype;
  const { B, S, H } = s;
  const inputs = {
    input_ids: tensor('int32', [B, S], s.ids),
    word_embedding: tensor(T, [s.V, H], s.word),
    position_embedding: tensor(T, [s.P, H], s.pos),
    gamma: tensor(T, [H], s.gamma),
    beta: tensor(T, [H], s.beta),
  };
  if (s.segIds) {
    inputs.segment_ids = tensor('int32', [B, S], s.segIds);
    inputs.segment_embedding = tensor(T, [s.G, H], s.seg);
  }
  if (s.mask) inputs.mask = tensor('int32', [B, S], s.mask);
  if (s.posIds) inputs.position_ids = tensor('int32', [s.posIdsB, S], s.posIds);
  const want = ['output', 'mask_index'];
  if (opts.sum !== false) want.push('embedding_sum');
  return { name, op: 'EmbedLayerNormalization', dtype, attrs: { epsilon: opts.epsilon === undefined ? ELN_EPS : opts.epsilon }, want, inputs, note: opts.note };
}

function a6(B, S, ids, extra) {
  return Object.assign({ B, S, H: A6.H, V: A6.V, P: A6.P, G: A6.G, ids, word: A6.word, pos: A6.pos, seg: A6.seg, gamma: A6.gamma, beta: A6.beta }, extra);
}

const G = {
  g1: () => a6(3, 2, [1, 3, 1, 3, 2, 0], { segIds: [0, 1, 0, 1, 0, 0], mask: [1, 1, 1, 1, 1, 0] }),
  g2: () => a6(3, 2, [1, 3, 1, 3, 2, 0], { mask: [1, 1, 1, 1, 1, 0] }),
  // G3 proper (segment table, no segment_ids) cannot be fed to the oracle's models; this is the
  // equivalent input with explicit all-zero segment_ids (spec §A.5: every token adds row 0).
  g3z: () => a6(1, 2, [1, 3], { segIds: [0, 0] }),
  g4: () => a6(1, 2, [1, 3], { posIds: [1, 1], posIdsB: 1 }),
  g5: () => a6(2, 2, [1, 3, 5, 4], { posIds: [2, 0], posIdsB: 1 }),
};

// Right-padded 0/1 mask: ORT CPU's mask_index counts ones, the library's default finds the
// first zero; they agree on these masks.
function rightPaddedMask(r, B, S) {
  const m = [];
  for (let b = 0; b < B; b++) {
    const len = r.int(0, S);
    for (let s = 0; s < S; s++) m.push(s < len ? 1 : 0);
  }
  return m;
}

function ints(r, n, lo, hi) { return Array.from({ length: n }, () => r.int(lo, hi)); }
function floats(r, n, lo, hi) { return Array.from({ length: n }, () => r.uniform(lo, hi)); }
function gammas(r, n) { return Array.from({ length: n }, () => r.sign() * r.uniform(0.5, 1.5)); }

// Random ELN inputs. o: { B, S, H, V, P, G, seg, mask, pos: 'none'|'bs'|'1s' }
function randomEln(name, o) {
  const r = makeRng(seedOf(name));
  const { B, S, H } = o;
  const V = o.V || 11;
  const P = o.P || 5;
  const NG = o.G || 2;
  const s = {
    B, S, H, V, P, G: NG,
    ids: ints(r, B * S, 0, V - 1),
    word: floats(r, V * H, -1, 1),
    pos: floats(r, P * H, -1, 1),
    gamma: gammas(r, H),
    beta: floats(r, H, -0.1, 0.1),
  };
  if (o.seg) {
    s.segIds = ints(r, B * S, 0, NG - 1);
    s.seg = floats(r, NG * H, -1, 1);
  }
  if (o.mask) s.mask = rightPaddedMask(r, B, S);
  if (o.pos === 'bs' || o.pos === '1s') {
    s.posIdsB = o.pos === 'bs' ? B : 1;
    s.posIds = ints(r, s.posIdsB * S, 0, P - 1);
  }
  return s;
}

function elnCases() {
  const out = [];
  out.push(elnCase('eln_g1', 'float32', G.g1()));
  out.push(elnCase('eln_g2', 'float32', G.g2()));
  out.push(elnCase('eln_g3_segids0', 'float32', G.g3z(), {
    note: 'spec §A.6 G3 with explicit all-zero segment_ids: the oracle cannot feed a segment table without segment_ids; the outputs are those of G3',
  }));
  out.push(elnCase('eln_g4', 'float32', G.g4()));
  out.push(elnCase('eln_g5', 'float32', G.g5()));

  // Optional-input combinations at a small shape.
  for (const seg of [true, false]) for (const mask of [true, false]) for (const pos of ['none', 'bs', '1s']) for (const sum of [true, false]) {
    const name = `eln_opt_seg${+seg}_mask${+mask}_pos${pos}_sum${+sum}`;
    out.push(elnCase(name, 'float32', randomEln(name, { B: 2, S: 3, H: 8, V: 11, P: 5, G: 2, seg, mask, pos }), { sum }));
  }

  // Hidden-size sweep.
  for (const H of [1, 3, 4, 5, 63, 64, 65, 255, 256, 257, 768, 1024]) {
    const name = `eln_h${H}`;
    out.push(elnCase(name, 'float32', randomEln(name, { B: 2, S: 3, H, V: 7, P: 4, G: 2, seg: true, mask: true, pos: 'none' })));
  }

  out.push(elnCase('eln_b5s2h4', 'float32', randomEln('eln_b5s2h4', { B: 5, S: 2, H: 4, seg: true, mask: true, pos: 'none' }), {
    note: 'large batch, small hidden (B > H) mask_index regression shape',
  }));
  out.push(elnCase('eln_eps0', 'float32', randomEln('eln_eps0', { B: 2, S: 3, H: 16, seg: true, mask: true, pos: 'none' }), {
    epsilon: 0, note: 'epsilon = 0 with non-constant rows',
  }));
  out.push(elnCase('eln_s128h64', 'float32', randomEln('eln_s128h64', { B: 3, S: 128, H: 64, V: 30, P: 128, G: 2, seg: true, mask: true, pos: 'none' }), {
    note: 'S = P = 128, implicit positions',
  }));

  // Data-dependent errors: ORT fails the run with "input index out of range".
  const errs = [
    ['eln_err_word_eq_v', 'input_ids contains V', (s) => { s.ids[4] = s.V; }],
    ['eln_err_word_neg', 'input_ids contains -1', (s) => { s.ids[1] = -1; }],
    ['eln_err_seg_eq_g', 'segment_ids contains G', (s) => { s.segIds[2] = s.G; }],
    ['eln_err_pos_neg', 'position_ids contains -1', (s) => { s.posIds[1] = -1; }, 'bs'],
    ['eln_err_pos_eq_p', 'position_ids contains P', (s) => { s.posIds[5] = s.P; }, 'bs'],
    ['eln_err_s_gt_p', 'S = 3 > P = 2 without position_ids', (s) => {}, 'none', 2],
  ];
  for (const [name, note, mutate, pos, P] of errs) {
    const s = randomEln(name, { B: 2, S: 3, H: 8, V: 11, P: P || 5, G: 2, seg: true, mask: true, pos: pos || 'none' });
    mutate(s);
    out.push(elnCase(name, 'float32', s, { note: 'error case: ' + note }));
  }

  // float16: ORT casts to f32, runs the f32 kernel and rounds once, so these are tolerance
  // references for the library's staged f16 sums.
  const f16note = 'ORT f16 = Cast + f32 kernel + one rounding; a tolerance reference for staged f16 sums';
  out.push(elnCase('eln_f16_g1', 'float16', G.g1(), { note: f16note }));
  out.push(elnCase('eln_f16_g2', 'float16', G.g2(), { note: f16note }));
  out.push(elnCase('eln_f16_g5', 'float16', G.g5(), { note: f16note }));
  for (const H of [5, 64, 257, 768]) {
    const name = `eln_f16_h${H}`;
    out.push(elnCase(name, 'float16', randomEln(name, { B: 2, S: 3, H, V: 7, P: 4, G: 2, seg: true, mask: true, pos: 'none' }), { note: f16note }));
  }
  return out;
}

// ------------------------------------------------------------------ SkipLayerNormalization
const SLN_EPS = 1e-5;
const SLN_WANT = ['output', 'mean', 'inv_std_var', 'input_skip_bias_sum'];

function slnCase(name, dtype, N, D, v, note) {
  const inputs = {
    input: tensor(dtype, [N, D], v.input),
    skip: tensor(dtype, [N, D], v.skip),
    gamma: tensor(dtype, [D], v.gamma),
    beta: tensor(dtype, [D], v.beta),
  };
  if (v.bias) inputs.bias = tensor(dtype, [D], v.bias);
  return { name, op: 'SkipLayerNormalization', dtype, attrs: { epsilon: SLN_EPS }, want: SLN_WANT, inputs, note };
}

function slnCases() {
  const out = [];
  for (const dtype of ['float32', 'float16']) {
    const dt = dtype === 'float32' ? 'f32' : 'f16';
    for (const N of [1, 24]) for (const D of [1, 7, 64, 257, 768]) for (const bias of [false, true]) {
      const name = `sln_${dt}_n${N}_d${D}_bias${+bias}`;
      const r = makeRng(seedOf(name));
      const v = {
        input: floats(r, N * D, -1, 1).map((x) => x + 0.5), // rows with a nonzero mean
        skip: floats(r, N * D, -1, 1),
        gamma: gammas(r, D),
        beta: floats(r, D, -0.1, 0.1),
      };
      if (bias) v.bias = floats(r, D, -0.2, 0.2);
      out.push(slnCase(name, dtype, N, D, v));
    }
  }
  // spec §B.7 vectors (AddLayerNorm x1, x2 -> input, skip).
  const b7 = {
    input: [1, 2, 3, 4, -1, 0.5, 2, 8],
    skip: [0.5, -0.5, 0.25, 1, 3, -2, 0, 1],
    gamma: [1, 0.5, 2, -1],
    beta: [0, 0.1, -0.2, 0.3],
  };
  out.push(slnCase('sln_a1', 'float32', 2, 4, b7, 'spec §B.7 A1 (no bias)'));
  out.push(slnCase('sln_a2', 'float32', 2, 4, Object.assign({ bias: [0.1, 0.2, 0.3, 0.4] }, b7), 'spec §B.7 A2 (bias)'));
  return out;
}

// ------------------------------------------------------------------ main
function main() {
  const o = parseArgs(process.argv.slice(2));
  const oracle = path.resolve(o.oracle);
  const ortJs = path.join(oracle, 'ort.js');
  if (!fs.existsSync(ortJs)) throw new Error(`${ortJs} not found`);
  if (!fs.existsSync(path.join(oracle, 'node_modules', 'onnxruntime-node'))) {
    throw new Error(`${oracle}: run "npm ci --ignore-scripts" there first`);
  }
  const out = path.resolve(o.out);
  if (fs.existsSync(out) && fs.readdirSync(out).length) {
    if (!o.force) throw new Error(`${out} is not empty (pass --force to replace it)`);
    fs.rmSync(out, { recursive: true, force: true });
  }
  fs.mkdirSync(out, { recursive: true });

  let cases = elnCases().concat(slnCases());
  if (o.only) cases = cases.filter((c) => c.name.includes(o.only));
  const seen = new Set();
  for (const c of cases) {
    if (seen.has(c.name)) throw new Error('duplicate case ' + c.name);
    seen.add(c.name);
    writeCase(out, c);
  }
  process.stdout.write(`wrote ${cases.length} cases to ${out}\n`);

  const res = spawnSync(process.execPath, [ortJs, '--all', out, '--threads', '1', '--quiet'], { stdio: 'inherit' });
  if (res.status !== 0) throw new Error(`ort.js exited with ${res.status}`);

  // Every case must come back as its name says: errors only for eln_err_*.
  let bad = 0;
  for (const c of cases) {
    const j = JSON.parse(fs.readFileSync(path.join(out, c.name, 'case.json'), 'utf8'));
    const wantErr = c.name.includes('_err_');
    if (wantErr !== (j.error !== null)) {
      process.stderr.write(`${c.name}: unexpected ${j.error === null ? 'success' : 'error: ' + j.error}\n`);
      bad++;
    }
  }
  if (bad) throw new Error(`${bad} cases did not come back as expected`);
}

main();
