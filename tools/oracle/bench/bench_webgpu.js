#!/usr/bin/env node
'use strict';
// ONNX Runtime's native WebGPU execution provider (onnxruntime-node 1.30 bundles it for Linux
// x64 with its own Dawn, on Vulkan) on the benchmark's cases, so the GPU figures of
// cmd/fusednorm-bench have the peer a WebGPU user would pick beside them.
//
//   node bench/bench_webgpu.js [--set bench|sweep] [--cases DIR] [--only SUBSTR] [--dtype f32|f16]
//                              [--quick] [--ep webgpu|cpu] [--min-runs N] [--min-secs S] [--list]
//
// The cases are the bench's own: internal/cases/<op>/<set>.json of the repository (--cases
// DIR for another folder laid out the same way), the same names, shapes, dtypes and -quick
// rule as cmd/fusednorm-bench, so each line pairs with the bench's row and with
// tools/anchors/gpu_anchor.py's. One JSON line per case on stdout (a header line first);
// progress on stderr.
//
// AddLayerNorm runs as com.microsoft.SkipLayerNormalization (input, skip, gamma, beta, bias)
// with outputs output and input_skip_bias_sum: ORT's WebGPU kernel has no mean and
// inv_std_var outputs (asking for them fails the run), so ORT writes 2*N*4 bytes fewer than
// the bench's case; `bytes` is what ORT's config moves, `case_bytes` the bench's rule.
// EmbedLayerNormalization has no WebGPU kernel in ORT: ORT places the node on its CPU EP;
// `provider` (from ORT's profiler) says where each node ran, so such a line is a CPU figure.
// bfloat16 cases are skipped (WebGPU has no bf16).
//
// Per case:
//   wall: median ms of `await session.run(feeds, fetches)` with the outputs preallocated, after
//         3 warm-up runs; at least --min-runs runs and --min-secs seconds (default 10 / 2 s,
//         at most 400 runs). Host tensors in and out: the time includes the uploads and the
//         read-back, as the bench's host-tensor column does.
//   gpu:  ORT's profiler (a second session with enableProfiling): the WebGPU EP reports each
//         dispatch's GPU time from timestamp queries ("Api" events); gpu_ms_median is the
//         median per run of their sum, dispatches the count per run. Absent when the node ran
//         on the CPU or the adapter has no timestamp queries.
//   kernel: the profiler's "Node" event: host time of the kernel call (on the WebGPU EP, the
//         recording and submission, not the GPU's work; on the CPU EP, the kernel itself).
// GB/s = bytes / time, 1 GB = 1e9 B.
const fs = require('fs');
const os = require('os');
const path = require('path');
const U = require('../lib/util.js');

// The model builder needs onnx-proto (node_modules); --list does not.
const models = () => require('../lib/models.js');

const SETS = ['bench', 'sweep'];
const OPS = [
  { dir: 'embedlayernorm', op: 'EmbedLayerNormalization' },
  { dir: 'addlayernorm', op: 'AddLayerNorm' },
];

function usage(msg) {
  if (msg) process.stderr.write(`bench_webgpu: ${msg}\n`);
  process.stderr.write('usage: node bench/bench_webgpu.js [--set bench|sweep] [--cases DIR] [--only SUBSTR] [--dtype f32|f16] [--quick] [--ep webgpu|cpu] [--min-runs N] [--min-secs S] [--list]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { set: 'bench', cases: null, only: '', dtype: 'all', quick: false, ep: 'webgpu', minRuns: 10, minSecs: 2, maxRuns: 400, list: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => { if (i + 1 >= argv.length) usage(`${a} needs a value`); return argv[++i]; };
    if (a === '--set') o.set = val();
    else if (a === '--cases') o.cases = val();
    else if (a === '--only') o.only = val();
    else if (a === '--dtype') o.dtype = val();
    else if (a === '--quick') o.quick = true;
    else if (a === '--ep') o.ep = val();
    else if (a === '--min-runs') o.minRuns = +val();
    else if (a === '--min-secs') o.minSecs = +val();
    else if (a === '--list') o.list = true;
    else usage(`unknown argument ${a}`);
  }
  if (!SETS.includes(o.set)) usage(`--set ${o.set}: want bench or sweep`);
  if (!['f32', 'f16', 'all'].includes(o.dtype)) usage(`--dtype ${o.dtype}: want f32, f16 or all`);
  if (!['webgpu', 'cpu'].includes(o.ep)) usage(`--ep ${o.ep}: want webgpu or cpu`);
  if (!(o.minRuns >= 1) || !(o.minSecs >= 0)) usage('--min-runs must be ≥ 1 and --min-secs ≥ 0');
  if (!o.cases) {
    // tools/oracle/bench and a copy at build/oracle/bench (make bench-ort) are both three
    // folders below the repository's root.
    o.cases = path.join(__dirname, '..', '..', '..', 'internal', 'cases');
  }
  return o;
}

const SHORT = { float32: 'f32', float16: 'f16', bfloat16: 'bf16' };
const esz = (dtype) => (dtype === 'float32' ? 4 : 2);

// The bench's bytes rule (bench.json's bytes_rule), for the case as the bench runs it.
function caseBytes(op, dtype, s) {
  const e = esz(dtype);
  if (op === 'EmbedLayerNormalization') {
    return { read: 3 * s.B * s.S * 4 + 3 * s.B * s.S * s.H * e + 2 * s.H * e, write: s.B * s.S * s.H * e + s.B * 4 };
  }
  return { read: 2 * s.N * s.D * e + 3 * s.D * e, write: 2 * s.N * s.D * e + 2 * s.N * 4 };
}

// loadCases reads both files of the set, applying -quick's rule as the bench does (divide
// one dimension, at least 1; cap others) and checking each case's bytes against the rule.
function loadCases(o) {
  const all = [];
  for (const { dir, op } of OPS) {
    const file = path.join(o.cases, dir, `${o.set}.json`);
    let bf;
    try {
      bf = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (e) {
      throw new Error(`${file}: ${e.message} (--cases DIR: a folder laid out like the repository's internal/cases)`);
    }
    if (bf.format !== 1 || bf.op !== op) throw new Error(`${file}: format ${bf.format}, op ${bf.op}; want 1, ${op}`);
    for (const c of bf.cases) {
      const shape = Object.assign({}, c.shape);
      let name = c.name;
      const b = caseBytes(op, c.dtype, shape);
      if (b.read !== c.bytes.read || b.write !== c.bytes.write) throw new Error(`${file}: case ${c.name}: bytes ${c.bytes.read}/${c.bytes.write}, the rule gives ${b.read}/${b.write}`);
      if (o.quick) {
        const q = bf.quick;
        shape[q.divide] = Math.max(1, Math.floor(shape[q.divide] / q.by));
        for (const [k, v] of Object.entries(q.cap || {})) if (k in shape) shape[k] = Math.min(shape[k], v);
        name += '-quick';
      }
      all.push({ name, op, dtype: c.dtype, shape, epsilon: bf.attrs.epsilon, caseBytes: caseBytes(op, c.dtype, shape) });
    }
  }
  return all.filter((c) => c.name.includes(o.only) && (o.dtype === 'all' || SHORT[c.dtype] === o.dtype));
}

function shapeString(c) {
  const s = c.shape;
  return c.op === 'EmbedLayerNormalization' ? `B${s.B} S${s.S} H${s.H}` : `N${s.N} D${s.D}`;
}

// ---------------------------------------------------------------- data
// Uniform values in [-scale, scale): f32 drawn per element, f16 from a table of 4096 evenly
// spaced values converted once (as the bench's filler does; conversion per element would
// dominate the setup of the largest cases).
function floats(r, dtype, n, scale) {
  if (dtype === 'float32') {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = scale * (r.float() * 2 - 1);
    return a;
  }
  const table = new Uint16Array(4096);
  for (let i = 0; i < 4096; i++) table[i] = U.f32ToF16(scale * (i / 2048 - 1));
  const a = new Uint16Array(n);
  for (let i = 0; i < n; i++) a[i] = table[r.u32() >>> 20];
  return a;
}

// setup builds the model and the tensors of a case: feeds, preallocated fetches, and the
// bytes ORT's config moves.
function setup(ort, c) {
  const M = models();
  const r = U.rng(7);
  const T = (dtype, data, dims) => new ort.Tensor(dtype, data, dims);
  const empty = (dtype, n, dims) => T(dtype, dtype === 'float32' ? new Float32Array(n) : new Uint16Array(n), dims);
  const dt = c.dtype;
  const e = esz(dt);
  const attrs = { epsilon: c.epsilon };
  if (c.op === 'EmbedLayerNormalization') {
    const { B, S, H, V, P, G } = c.shape;
    const v = { dtype: dt, seg: true, mask: true, pos: false, sum: false };
    const ids = new Int32Array(B * S);
    for (let i = 0; i < ids.length; i++) ids[i] = r.int(0, V - 1);
    const seg = new Int32Array(B * S);
    for (let i = 0; i < seg.length; i++) seg[i] = (i % S) < S / 2 ? 0 : 1;
    const mask = new Int32Array(B * S);
    for (let b = 0; b < B; b++) { const len = r.int(Math.ceil(S / 2), S); for (let s = 0; s < S; s++) mask[b * S + s] = s < len ? 1 : 0; }
    return {
      model: M.modelPath(M.elnVariantName(v), attrs.epsilon === 1e-12 ? {} : attrs, H),
      feeds: {
        input_ids: T('int32', ids, [B, S]), segment_ids: T('int32', seg, [B, S]), mask: T('int32', mask, [B, S]),
        word_embedding: T(dt, floats(r, dt, V * H, 0.5), [V, H]), position_embedding: T(dt, floats(r, dt, P * H, 0.5), [P, H]),
        segment_embedding: T(dt, floats(r, dt, G * H, 0.5), [G, H]), gamma: T(dt, floats(r, dt, H, 1), [H]), beta: T(dt, floats(r, dt, H, 0.1), [H]),
      },
      fetches: { output: empty(dt, B * S * H, [B, S, H]), mask_index: T('int32', new Int32Array(B), [B]) },
      bytes: { read: 3 * B * S * 4 + 3 * B * S * H * e + 2 * H * e, write: B * S * H * e + B * 4 },
      ortOp: 'EmbedLayerNormalization',
    };
  }
  const { N, D } = c.shape;
  const v = { dtype: dt, beta: true, bias: true, stats: false, sum: true };
  return {
    model: M.modelPath(M.slnVariantName(v), attrs),
    feeds: {
      input: T(dt, floats(r, dt, N * D, 1), [N, D]), skip: T(dt, floats(r, dt, N * D, 1), [N, D]),
      gamma: T(dt, floats(r, dt, D, 1), [D]), beta: T(dt, floats(r, dt, D, 0.1), [D]), bias: T(dt, floats(r, dt, D, 0.1), [D]),
    },
    fetches: { output: empty(dt, N * D, [N, D]), input_skip_bias_sum: empty(dt, N * D, [N, D]) },
    bytes: { read: 2 * N * D * e + 3 * D * e, write: 2 * N * D * e },
    ortOp: 'SkipLayerNormalization -> output,input_skip_bias_sum',
  };
}

// ---------------------------------------------------------------- timing
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

function sessionOptions(o, extra) {
  return Object.assign({
    executionProviders: [o.ep],
    graphOptimizationLevel: 'disabled',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    logSeverityLevel: 3,
  }, extra || {});
}

async function timeWall(o, session, feeds, fetches) {
  for (let i = 0; i < 3; i++) await session.run(feeds, fetches);
  const ts = [];
  const t0 = performance.now();
  while (ts.length < o.maxRuns && (ts.length < o.minRuns || performance.now() - t0 < o.minSecs * 1000)) {
    const t = performance.now();
    await session.run(feeds, fetches);
    ts.push(performance.now() - t);
  }
  return ts;
}

// profile runs the case under ORT's profiler: 3 warm-up runs then `runs` more, and returns
// per run the node's host time, the GPU time of its dispatches and their count, and the
// providers the node events name.
async function profile(ort, o, model, feeds, fetches, runs) {
  const prefix = path.join(os.tmpdir(), `ortwebgpu_${process.pid}_${Date.now()}`);
  const s = await ort.InferenceSession.create(model, sessionOptions(o, { enableProfiling: true, profileFilePrefix: prefix }));
  for (let i = 0; i < 3 + runs; i++) await s.run(feeds, fetches);
  s.endProfiling();
  await s.release();
  const dir = path.dirname(prefix);
  const files = fs.readdirSync(dir).filter((x) => x.startsWith(path.basename(prefix)));
  if (files.length === 0) throw new Error('ORT wrote no profile');
  const ev = JSON.parse(fs.readFileSync(path.join(dir, files[0]), 'utf8'));
  files.forEach((x) => fs.unlinkSync(path.join(dir, x)));
  const runEv = ev.filter((e) => e.cat === 'Session' && e.name === 'model_run').sort((a, b) => a.ts - b.ts);
  const nodes = ev.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time'));
  const perRun = runEv.map((rr) => nodes.filter((n) => n.ts >= rr.ts && n.ts <= rr.ts + rr.dur).reduce((acc, n) => acc + n.dur, 0) / 1000);
  const providers = [...new Set(nodes.map((n) => n.args && n.args.provider))];
  // "Api" events: one per WebGPU dispatch, its GPU time from timestamp queries. They are
  // resolved after the runs, so they are split into runs by count, in order.
  const api = ev.filter((e) => e.cat === 'Api').sort((a, b) => a.ts - b.ts);
  const res = { kernelMs: perRun.slice(3), providers, programs: [...new Set(api.map((e) => e.name))] };
  if (api.length > 0 && api.length % runEv.length === 0) {
    const k = api.length / runEv.length;
    const gpu = [];
    for (let i = 3; i < runEv.length; i++) gpu.push(api.slice(i * k, (i + 1) * k).reduce((acc, e) => acc + e.dur, 0) / 1000);
    res.gpuMs = gpu;
    res.dispatches = k;
  } else if (api.length > 0) {
    res.gpuNote = `${api.length} GPU events over ${runEv.length} runs: not split into runs`;
  }
  return res;
}

const round = (x, d = 4) => +x.toFixed(d);

async function runCase(ort, o, c) {
  const line = { case: c.name, op: c.op, shape: c.shape, dtype: c.dtype, ep: o.ep };
  if (c.dtype === 'bfloat16') {
    line.skipped = 'bfloat16: not timed; WGSL has no bf16 type and the WebGPU EP\'s kernels take float32 and float16';
    return line;
  }
  const t0 = performance.now();
  const { model, feeds, fetches, bytes, ortOp } = setup(ort, c);
  line.ort_op = ortOp;
  line.bytes = bytes.read + bytes.write;
  line.case_bytes = c.caseBytes.read + c.caseBytes.write;
  line.setup_s = round((performance.now() - t0) / 1e3, 2);
  const session = await ort.InferenceSession.create(model, sessionOptions(o));
  let wall;
  try {
    wall = await timeWall(o, session, feeds, fetches);
  } finally {
    await session.release();
  }
  line.runs = wall.length;
  line.wall_ms_median = round(median(wall));
  line.wall_ms_min = round(Math.min(...wall));
  line.wall_GBps = round(line.bytes / (line.wall_ms_median * 1e6), 2);
  const p = await profile(ort, o, model, feeds, fetches, Math.min(15, Math.max(5, wall.length)));
  line.provider = p.providers.join('+');
  line.kernel_ms_median = round(median(p.kernelMs));
  if (p.gpuMs) {
    line.gpu_ms_median = round(median(p.gpuMs));
    line.gpu_ms_min = round(Math.min(...p.gpuMs));
    line.dispatches = p.dispatches;
    line.gpu_GBps = round(line.bytes / (line.gpu_ms_median * 1e6), 2);
    line.programs = p.programs;
  } else if (p.gpuNote) {
    line.gpu_note = p.gpuNote;
  }
  if (o.ep === 'webgpu' && !p.providers.includes('WebGpuExecutionProvider')) {
    line.note = `no WebGPU kernel: ORT ran the node on ${line.provider}; a CPU figure, not a GPU one`;
  }
  return line;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const cases = loadCases(o);
  if (o.list) {
    for (const c of cases) process.stdout.write(`${c.name}\t${c.op}\t${shapeString(c)}\t${c.dtype}\t${c.caseBytes.read + c.caseBytes.write}\n`);
    return;
  }
  if (cases.length === 0) usage(`no case of ${o.set} matches --only ${JSON.stringify(o.only)} --dtype ${o.dtype}`);
  const ort = require('onnxruntime-node');
  const backends = typeof ort.listSupportedBackends === 'function' ? ort.listSupportedBackends() : [];
  if (o.ep === 'webgpu' && !backends.some((b) => b.name === 'webgpu' && b.bundled)) {
    process.stderr.write(`bench_webgpu: this onnxruntime-node (${ort.env.versions.node}) has no WebGPU EP (backends: ${backends.map((b) => b.name + (b.bundled ? '' : ' (not bundled)')).join(', ') || 'unknown'}); nothing timed. --ep cpu times the CPU EP on the same cases.\n`);
    process.exit(3);
  }
  process.stdout.write(JSON.stringify({
    ort: ort.env.versions.node, ep: o.ep, set: o.set, quick: o.quick,
    host: { cpus: os.cpus().length, model: os.cpus()[0].model, mem_gb: +(os.totalmem() / 1e9).toFixed(1) },
    vk_icd_filenames: process.env.VK_ICD_FILENAMES || null, vk_driver_files: process.env.VK_DRIVER_FILES || null,
    timing: { min_runs: o.minRuns, min_secs: o.minSecs, max_runs: o.maxRuns, warmup: 3 },
  }) + '\n');
  let failed = 0;
  for (const [i, c] of cases.entries()) {
    process.stderr.write(`case ${i + 1}/${cases.length} ${c.name} (${shapeString(c)}) ${SHORT[c.dtype]}… `);
    let line;
    try {
      line = await runCase(ort, o, c);
    } catch (e) {
      failed++;
      line = { case: c.name, op: c.op, shape: c.shape, dtype: c.dtype, ep: o.ep, error: String(e && e.message ? e.message : e).split('\n')[0].slice(0, 400) };
      if (o.ep === 'webgpu' && /WebGPU adapter|No supported adapters|RequestAdapter/i.test(line.error)) {
        process.stdout.write(JSON.stringify(line) + '\n');
        process.stderr.write(`\nbench_webgpu: the WebGPU EP found no adapter (${line.error}); is a Vulkan driver installed (or VK_ICD_FILENAMES set)? Nothing timed; --ep cpu times the CPU EP on the same cases.\n`);
        process.exit(3);
      }
    }
    process.stderr.write(line.error ? `error: ${line.error}\n` : line.skipped ? `skipped: ${line.skipped}\n`
      : `wall ${line.wall_ms_median} ms, gpu ${line.gpu_ms_median ?? '-'} ms, on ${line.provider}\n`);
    process.stdout.write(JSON.stringify(line) + '\n');
  }
  if (failed > 0) {
    process.stderr.write(`bench_webgpu: ${failed} of ${cases.length} cases failed\n`);
    process.exit(1);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
