#!/usr/bin/env node
'use strict';
// Pairs a fusednorm-bench -json file (Dawn) with bench_webgpu.js's JSON lines (ONNX Runtime's
// WebGPU EP) on the same cases, by name, into one Markdown table: the kernels' GPU time and
// the host-tensor calls' wall time side by side. Plain Node, no packages.
//
//   node bench/webgpu_table.js BENCH.json ORT.jsonl [--json MERGED.json] > table.md
//
// Columns (µs, medians): kernel = the bench's device time per dispatch (kernel_ms_median);
// ORT GPU = the sum of ORT's dispatches for the node in one run, from its profiler's timestamp
// queries (gpu_ms_median; `disp.` is their count); host wall = one call on host tensors
// (median_ms); ORT wall = `session.run` on host tensors (wall_ms_median). Ratios are ours over
// ORT's: under 1, ours is faster. ORT's SkipLayerNormalization writes no mean and inv_std_var,
// 8 bytes a row fewer than the bench's case.
const fs = require('fs');

function usage(msg) {
  if (msg) process.stderr.write(`webgpu_table: ${msg}\n`);
  process.stderr.write('usage: node bench/webgpu_table.js BENCH.json ORT.jsonl [--json MERGED.json]\n');
  process.exit(2);
}

const args = process.argv.slice(2);
let jsonOut = null;
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--json') { if (i + 1 >= args.length) usage('--json needs a value'); jsonOut = args[++i]; }
  else if (args[i].startsWith('-')) usage(`unknown argument ${args[i]}`);
  else files.push(args[i]);
}
if (files.length !== 2) usage('want two files');

let bench;
try {
  bench = JSON.parse(fs.readFileSync(files[0], 'utf8'));
} catch (e) {
  usage(`${files[0]}: ${e.message}`);
}
if (!bench || !Array.isArray(bench.results)) usage(`${files[0]}: not a fusednorm-bench -json file`);

let header = null;
const ort = new Map();
let ortText = '';
try {
  ortText = fs.readFileSync(files[1], 'utf8');
} catch (e) {
  process.stderr.write(`webgpu_table: ${files[1]}: ${e.message}; the ORT columns stay empty\n`);
}
for (const l of ortText.split('\n')) {
  if (!l.trim()) continue;
  let o;
  try { o = JSON.parse(l); } catch (e) { continue; }
  if (o.case) ort.set(o.case, o);
  else if (o.ort) header = o;
}

const SHORT = { float32: 'f32', float16: 'f16', bfloat16: 'bf16' };
const shape = (s) => (s ? Object.keys(s).sort((a, b) => 'NDBSH'.indexOf(a) - 'NDBSH'.indexOf(b)).filter((k) => 'NDBSH'.includes(k)).map((k) => `${k}${s[k]}`).join(' ') : '');
const us = (ms) => (typeof ms === 'number' && ms > 0 ? ms * 1000 : null);
const fmt = (x) => (x === null ? '-' : x >= 100 ? x.toFixed(1) : x >= 10 ? x.toFixed(2) : x.toFixed(3));
const ratio = (a, b) => (a !== null && b !== null ? a / b : null);
const fmtR = (x) => (x === null ? '-' : x.toFixed(3));

const rows = [];
const seen = new Set();
for (const r of bench.results) {
  if (r.op && r.op !== 'AddLayerNorm') continue;
  seen.add(r.case);
  const o = ort.get(r.case) || null;
  const row = {
    case: r.case, shape: shape(r.shape), dtype: SHORT[r.dtype] || r.dtype,
    kernel_us: us(r.kernel_ms_median), ort_gpu_us: o ? us(o.gpu_ms_median) : null, ort_dispatches: o && o.dispatches ? o.dispatches : null,
    wall_us: us(r.median_ms), ort_wall_us: o ? us(o.wall_ms_median) : null,
    ran_on: r.ran_on || r.backend || null, ort_provider: o ? o.provider || null : null,
  };
  row.kernel_over_ort = ratio(row.kernel_us, row.ort_gpu_us);
  row.wall_over_ort = ratio(row.wall_us, row.ort_wall_us);
  const notes = [];
  if (r.skipped) notes.push(`ours: ${r.skipped}`);
  if (r.error) notes.push(`ours: ${r.error}`);
  if (!o) notes.push('ORT: no line');
  else {
    if (o.skipped) notes.push(`ORT: ${o.skipped.split(';')[0]}`);
    if (o.error) notes.push(`ORT: ${o.error}`);
    if (o.note) notes.push(`ORT: ${o.note}`);
    if (o.gpu_note) notes.push(`ORT: ${o.gpu_note}`);
  }
  row.note = notes.join('; ');
  rows.push(row);
}
for (const [name, o] of ort) {
  if (seen.has(name) || o.op !== 'AddLayerNorm') continue;
  rows.push({
    case: name, shape: shape(o.shape), dtype: SHORT[o.dtype] || o.dtype, kernel_us: null, ort_gpu_us: us(o.gpu_ms_median),
    ort_dispatches: o.dispatches || null, wall_us: null, ort_wall_us: us(o.wall_ms_median), kernel_over_ort: null, wall_over_ort: null,
    ran_on: null, ort_provider: o.provider || null, note: 'ours: no row' + (o.error ? `; ORT: ${o.error}` : o.skipped ? `; ORT: ${o.skipped.split(';')[0]}` : ''),
  });
}

const out = [];
const eng = bench.engine || {};
out.push(`ours: fusednorm-bench ${bench.time || ''}, ${eng.Backend || '?'} on ${eng.Device || '?'}${eng.Detail ? ` [${eng.Detail}]` : ''}`);
if (bench.settings) out.push(`ours' settings: ${Object.entries(bench.settings).map(([k, v]) => `${k}=${v}`).join(' ')}`);
if (header) out.push(`ORT: onnxruntime-node ${header.ort}, ${header.ep} EP, set ${header.set}${header.quick ? ' (quick)' : ''}, timing ${JSON.stringify(header.timing)}`);
else out.push('ORT: no header line (did bench_webgpu.js run?)');
out.push('');
out.push('| case | shape | dtype | kernel µs | ORT GPU µs | disp. | kernel / ORT | host wall µs | ORT wall µs | wall / ORT | note |');
out.push('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|');
for (const r of rows) {
  out.push(`| ${r.case} | ${r.shape} | ${r.dtype} | ${fmt(r.kernel_us)} | ${fmt(r.ort_gpu_us)} | ${r.ort_dispatches ?? '-'} | ${fmtR(r.kernel_over_ort)} | ${fmt(r.wall_us)} | ${fmt(r.ort_wall_us)} | ${fmtR(r.wall_over_ort)} | ${r.note} |`);
}
const kr = rows.filter((r) => r.kernel_over_ort !== null);
const wr = rows.filter((r) => r.wall_over_ort !== null);
out.push('');
out.push(`${kr.filter((r) => r.kernel_over_ort <= 1).length} of ${kr.length} kernels at or under ORT WebGPU's GPU time; ` +
  `${wr.filter((r) => r.wall_over_ort <= 1).length} of ${wr.length} host-tensor calls at or under ORT's run() wall time. ` +
  'Ratios: ours over ORT. ORT writes no mean and inv_std_var (8 bytes a row fewer than the case).');
process.stdout.write(out.join('\n') + '\n');
if (jsonOut) {
  fs.writeFileSync(jsonOut, JSON.stringify({ bench: { time: bench.time, engine: bench.engine, settings: bench.settings }, ort: header, rows }, null, 1) + '\n');
}
