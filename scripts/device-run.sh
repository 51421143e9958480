#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after scripts/device-build.sh here
# (carry carry/, third_party/dawn and .gl: the Vulkan loader and glvnd debs, see the device
# tool's README). Results go to $OUT.
#   (no argument)  correctness, then the small measurements: the conformance suite on Dawn
#                  (Dawn required, every output against the CPU plan), device tensors and
#                  device loss through the root package's tests, the tiny-dispatch benchmark
#                  of the C layer beside the Go API's (issue 17's two patterns), the staging
#                  ring's upload and read-back GB/s beside the plain path's (with a CPU
#                  profile), the coverage counters of one auto-engine call
#                  (scripts/call-files.sh), and torch's anchors (tools/anchors/gpu_anchor.py:
#                  device copy, transfers, eager, torch.compile).
#   tiny           the tiny twins alone: C and Go in one process, 21 rounds (ROUNDS=n for
#                  another count), then the C twin as a program of its own.
#   speed          the benchmark on Dawn (host-tensor wall, device-resident wall, kernel
#                  time, the WGSL copy), then -compare: host-tensor calls on the CPU (all
#                  threads), on Dawn and in auto mode, interleaved in one process. Run it
#                  right after the first, on the same machine, so every figure comes from
#                  the same minutes.
#   chain          the model-shaped chains of norms (fusednorm-bench -chain): BERT-base
#                  (1,128,768) and (8,128,768) with 24 AddLayerNorms, and (64,512,1024),
#                  f32 and f16, per call beside the kernels' time and the CPU's host chain.
#   sweep          the width sweep (fusednorm-bench -set sweep) on Dawn, DTYPE=f32|f16|bf16
#                  and ONLY=<name part> to split it over calls, then torch's anchors on the
#                  same cases (gpu_anchor.py --set sweep).
#   adapters       every adapter at once (fusednorm-bench -every-adapter: each engine alone,
#                  then all together), the conformance suite per adapter and the loss-isolation
#                  tests: for a machine with two GPUs.
#   paired         the new main against carry/old (OLD=<rev> scripts/device-build.sh): the
#                  bench cases' kernel and device-resident times and the tiny calls, each
#                  binary ROUNDS times (default 3) in a new random order per round.
#   webgpu         ONNX Runtime's WebGPU EP beside Dawn on the AddLayerNorm cases (after
#                  ORT=1 scripts/device-build.sh; carry carry/fusednorm-bench, carry/ort.tar.xz,
#                  third_party/dawn and .gl): the benchmark on Dawn, then
#                  tools/oracle/bench/bench_webgpu.js (ORT 1.30's SkipLayerNormalization with
#                  beta, bias and the sum output, its own Dawn on the same Vulkan driver) on the
#                  same cases from internal/cases, then one table, webgpu.md (and webgpu.json):
#                  our kernel time per dispatch against the GPU time of ORT's dispatches per run
#                  (its profiler), our host-tensor wall against ORT's run() wall, ours over
#                  ORT's. SET=bench (default; about 2-3 minutes) or SET=sweep (one DTYPE=f32 or
#                  f16 a call, about 4 minutes; ORT skips bf16: WGSL has none); ONLY=<name part>
#                  (default addln: keep it within AddLayerNorm's names, e.g. lat-addln);
#                  QUICK=1: the small variants on both sides, a smoke run.
# With the argument "cpu" it runs the CPU part instead: that machine's processor has
# AVX-512, so it is where the avx512 kernels are tested (the kernel tests and the whole
# conformance suite at every level, bit for bit against the pure-Go plan) and timed
# (LEVELS picks the one-thread levels timed, default "avx512 avx2"; one device call has
# room for one of them with the tests).
# With "ort" (after ORT=1 scripts/device-build.sh; carry carry/fusednorm-bench and
# carry/ort.tar.xz) it runs the benchmark on one thread beside ONNX Runtime's CPU kernel on
# the same shapes, as `make bench-ort` does here (LEVEL picks the kernels, default the widest).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "${1:-}" = ort ]; then
	ort=/tmp/fusednorm-ort
	rm -rf "$ort" && mkdir -p "$ort" && tar xJf carry/ort.tar.xz -C "$ort" || exit 1
	{ lscpu | grep "Model name"; "$ort/bin/node" --version; } | tee "$OUT/cpu.txt"
	PATH=$ort/bin:$PATH timeout 560 carry/fusednorm-bench -backend cpu ${LEVEL:+-level $LEVEL} \
		-threads 1 -ort "$ort/oracle" ${ONLY:+-only $ONLY} -json "$OUT/bench-ort.json" >"$OUT/bench-ort.txt" 2>&1
	echo "bench with ORT rc=$?"; tail -20 "$OUT/bench-ort.txt"
	exit 0
fi
if [ "${1:-}" = cpu ]; then
	{ lscpu | grep "Model name"; grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } >"$OUT/cpu.txt"
	(cd internal/cpu && timeout 150 ../../carry/cpu.test -test.v >"$OUT/cpu-test.log" 2>&1; echo "rc=$?" >>"$OUT/cpu-test.log")
	grep -E "^(--- |ok|FAIL|rc=)" "$OUT/cpu-test.log" | grep -v "^--- PASS" | tail -5
	(cd tests && timeout 200 ../carry/conformance.test -test.run TestCPU -test.v >"$OUT/conformance-cpu.log" 2>&1; echo "rc=$?" >>"$OUT/conformance-cpu.log")
	grep -E "^(--- |ok|FAIL|rc=)" "$OUT/conformance-cpu.log" | tail -8
	for lv in ${LEVELS:-avx512 avx2}; do
		timeout 200 carry/fusednorm-bench -backend cpu -level $lv -threads 1 -reps 3 -min-time 0.3s \
			-json "$OUT/bench-cpu-$lv-1thread.json" >"$OUT/bench-cpu-$lv-1thread.txt" 2>&1
		echo "bench $lv 1 thread rc=$?"; tail -14 "$OUT/bench-cpu-$lv-1thread.txt"
	done
	timeout 150 carry/fusednorm-bench -backend cpu -reps 3 -min-time 0.3s \
		-json "$OUT/bench-cpu-avx512-all.json" >"$OUT/bench-cpu-avx512-all.txt" 2>&1
	echo "bench all threads rc=$?"; tail -14 "$OUT/bench-cpu-avx512-all.txt"
	exit 0
fi
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export FUSEDNORM_DAWN_LIB=$PWD/third_party/dawn/libwebgpu_wrapper.so FUSEDNORM_REQUIRE_DAWN=1
if [ "${1:-}" = webgpu ]; then
	caseset=${SET:-bench} only=${ONLY:-addln}
	flags="-warmup 3 -reps 5 -min-time 0.2s"
	[ "$caseset" = sweep ] && flags="-reps 3 -min-time 0.1s"
	ort=/tmp/fusednorm-ort
	rm -rf "$ort" && mkdir -p "$ort" && tar xJf carry/ort.tar.xz -C "$ort" || exit 1
	{ nvidia-smi -L; echo "node $("$ort/bin/node" --version), set $caseset, only $only${DTYPE:+, dtype $DTYPE}"; } | tee "$OUT/webgpu-machine.txt"
	timeout 220 carry/fusednorm-bench -backend dawn -cases "$PWD/internal/cases" -set "$caseset" -only "$only" ${DTYPE:+-dtype $DTYPE} ${QUICK:+-quick} \
		-probe=false $flags -json "$OUT/webgpu-dawn.json" >"$OUT/webgpu-dawn.txt" 2>"$OUT/webgpu-dawn.err"
	echo "bench dawn rc=$?"; cat "$OUT/webgpu-dawn.txt"
	# Wall: median of at least 5 runs (as -reps 5) and 1 s, after 3 warm-ups; GPU: a second,
	# profiled session of 3 + 5 to 15 runs (bench_webgpu.js's header).
	timeout 320 "$ort/bin/node" "$ort/oracle/bench/bench_webgpu.js" --ep webgpu --cases "$PWD/internal/cases" --set "$caseset" \
		--only "$only" ${DTYPE:+--dtype $DTYPE} ${QUICK:+--quick} --min-runs 5 --min-secs 1 >"$OUT/webgpu-ort.jsonl" 2>"$OUT/webgpu-ort.err"
	echo "ORT webgpu rc=$? (3: no adapter or no WebGPU EP; 1: a case failed, see its line)"; grep -v '^Warning: max' "$OUT/webgpu-ort.err" | tail -5
	"$ort/bin/node" tools/oracle/bench/webgpu_table.js "$OUT/webgpu-dawn.json" "$OUT/webgpu-ort.jsonl" \
		--json "$OUT/webgpu.json" | tee "$OUT/webgpu.md"
	exit 0
fi
if [ "${1:-}" = tiny ]; then
	# The tiny twins in one process (fusednorm-bench -tiny runs the C twin beside the Go
	# calls, in a new random order each round): separate processes each landed in one of two
	# speeds (AddLayerNorm one by one about 31 or 35 us in C), which decided a difference of
	# a few percent by how many processes of each twin landed fast. Then the C program once,
	# as a check that the twin in a Go process runs as fast as alone. CPU layout: cpus.txt.
	lscpu -e >"$OUT/cpus.txt" 2>&1
	{ GOMAXPROCS=4 taskset -c 4-7 timeout 150 carry/fusednorm-bench -backend dawn -tiny 3000 -tiny-rounds "${ROUNDS:-21}"
	  taskset -c 4-7 timeout 40 carry/tiny_bench "$FUSEDNORM_DAWN_LIB" carry/tiny 3000
	} >"$OUT/tiny.txt" 2>&1
	grep -E "^(C |Go |C twin)" "$OUT/tiny.txt"
	exit 0
fi
if [ "${1:-}" = chain ]; then
	timeout 500 carry/fusednorm-bench -backend dawn -chain 1x128x768,8x128x768,64x512x1024 -chain-layers 24 \
		-threads "$(nproc)" -reps 5 -min-time 1s -json "$OUT/chain.json" >"$OUT/chain.txt" 2>/dev/null
	echo "chain rc=$?"; cat "$OUT/chain.txt"
	exit 0
fi
if [ "${1:-}" = sweep ]; then
	timeout 400 carry/fusednorm-bench -backend dawn -set sweep -probe=false -reps 3 -min-time 0.1s \
		${DTYPE:+-dtype $DTYPE} ${ONLY:+-only $ONLY} -json "$OUT/sweep-dawn.json" >"$OUT/sweep-dawn.txt" 2>/dev/null
	echo "sweep rc=$?"; cat "$OUT/sweep-dawn.txt"
	(cd carry && PYTHONUNBUFFERED=1 timeout 180 python3 gpu_anchor.py --cases "$PWD/../internal/cases" --set sweep \
		${DTYPE:+--dtype $DTYPE} ${ONLY:+--only $ONLY} >"$OUT/sweep-anchor.jsonl" 2>"$OUT/sweep-anchor.err"; echo "anchor rc=$?")
	cut -c1-160 "$OUT/sweep-anchor.jsonl"
	exit 0
fi
if [ "${1:-}" = adapters ]; then
	nvidia-smi -L
	timeout 300 carry/fusednorm-bench -every-adapter -probe=false -reps 3 -min-time 0.2s \
		-json "$OUT/every-adapter.json" >"$OUT/every-adapter.txt" 2>/dev/null
	echo "every-adapter rc=$?"; cat "$OUT/every-adapter.txt"
	(cd tests && timeout 200 ../carry/conformance.test -test.run '^TestDawn$' -test.v >"$OUT/conformance-adapters.log" 2>&1; echo "rc=$?" >>"$OUT/conformance-adapters.log")
	grep -E "engine:|--- |rc=" "$OUT/conformance-adapters.log" | tail -8
	timeout 60 carry/root.test -test.run 'TestAdaptersAndSelectors|TestEnginePerAdapter' -test.v >"$OUT/adapters.log" 2>&1
	echo "adapter tests rc=$?"; grep -E "^(--- |ok|FAIL)" "$OUT/adapters.log"
	exit 0
fi
if [ "${1:-}" = paired ]; then
	echo "old: $(cat carry/old/REV)"
	for r in $(seq "${ROUNDS:-3}"); do
		for side in $(printf 'old\nnew\n' | shuf); do
			bin=carry/fusednorm-bench
			[ "$side" = old ] && bin=carry/old/fusednorm-bench
			timeout 100 $bin -backend dawn -probe=false -warmup 3 -reps 3 -min-time 0.1s \
				-json "$OUT/paired-$side-$r.json" >"$OUT/paired-$side-$r.txt" 2>/dev/null
			GOMAXPROCS=4 taskset -c 4-7 timeout 40 $bin -backend dawn -tiny 2000 -tiny-rounds 1 >"$OUT/paired-tiny-$side-$r.txt" 2>&1
			echo "round $r $side rc=$?"
			xfer=carry/dawnrt.test
			[ "$side" = old ] && xfer=carry/old/transfer.test
			timeout 40 $xfer -test.run '^$' -test.bench 'Transfer/.*/.*/1024MiB' -test.benchtime 3x >"$OUT/paired-transfer-$side-$r.txt" 2>&1
		done
	done
	exit 0
fi
if [ "${1:-}" = speed ]; then
	# -compare: 24 untimed calls a case per engine, as auto explores a new shape for about
	# twenty calls (README, "What auto picks"), so its column is where it settles.
	timeout 240 carry/fusednorm-bench -backend dawn -probe=false -warmup 12 -reps 5 -min-time 0.2s \
		-json "$OUT/bench-dawn.json" >"$OUT/bench-dawn.txt" 2>/dev/null
	echo "bench dawn rc=$?"; cat "$OUT/bench-dawn.txt"
	timeout 320 carry/fusednorm-bench -compare -threads "$(nproc)" -warmup 24 -reps 5 -min-time 0.2s \
		-json "$OUT/bench-compare.json" >"$OUT/bench-compare.txt" 2>/dev/null
	echo "bench compare rc=$?"; cat "$OUT/bench-compare.txt"
	exit 0
fi
nvidia-smi -L
(cd tests && timeout 170 ../carry/conformance.test -test.run "TestDawn|TestMisuse" -test.v >"$OUT/conformance.log" 2>&1; echo "rc=$?" >>"$OUT/conformance.log")
grep -E "engine:|--- FAIL|rc=" "$OUT/conformance.log" | tail -5
timeout 100 carry/root.test -test.run 'TestDevice|TestInfoNames|TestCloseDuringCallDawn|TestDawn' -test.v >"$OUT/root.log" 2>&1
echo "root tests rc=$?"; grep -E "^(--- FAIL|ok|FAIL)" "$OUT/root.log"; grep -c "^--- PASS" "$OUT/root.log"
# The C and Go twins in one process (see the tiny mode), five rounds on the same four cores,
# then the Go benchmarks with their allocations.
{ GOMAXPROCS=4 taskset -c 4-7 timeout 60 carry/fusednorm-bench -backend dawn -tiny 3000 -tiny-rounds 5
  FUSEDNORM_BACKEND=dawn timeout 60 carry/root.test -test.run XXX -test.bench Tiny -test.benchmem -test.benchtime 3000x
} >"$OUT/tiny.txt" 2>&1
grep -E "^(C |Go |C twin|Benchmark)" "$OUT/tiny.txt"
timeout 60 carry/dawnrt.test -test.run '^$' -test.bench 'Transfer/.*/.*/1024MiB' -test.benchtime 4x \
	-test.cpuprofile "$OUT/transfer.prof" >"$OUT/transfer.txt" 2>&1
echo "transfer rc=$?"; grep -E "^Benchmark" "$OUT/transfer.txt"
# The files one host-tensor AddLayerNorm visits on the auto engine: count them with
# scripts/call-files.sh count <the folder>.
(unset FUSEDNORM_BACKEND; mkdir -p "$OUT/callfiles" /tmp/callfiles-exit &&
	GOCOVERDIR=/tmp/callfiles-exit timeout 60 carry/callfiles -out "$OUT/callfiles")
[ "${ANCHORS:-1}" = 0 ] && exit 0 # ANCHORS=0: torch's anchors were taken in an earlier call
(cd carry && PYTHONUNBUFFERED=1 timeout 200 python3 gpu_anchor.py >"$OUT/anchor.jsonl" 2>"$OUT/anchor.err"; echo "anchor rc=$?")
cut -c1-200 "$OUT/anchor.jsonl"
