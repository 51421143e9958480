#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after scripts/device-build.sh here:
# the conformance suite on Dawn (Dawn required), the root package's tests (fault injection on
# the real device), and the benchmark with the backend left to auto. Results go to $OUT.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export FUSEDNORM_DAWN_LIB=$PWD/third_party/dawn/libwebgpu_wrapper.so FUSEDNORM_REQUIRE_DAWN=1
(cd tests && timeout 240 ../carry/conformance.test -test.run TestDawn -test.v >"$OUT/conformance.log" 2>&1; echo "rc=$?" >>"$OUT/conformance.log")
grep -E "engine:|max ulp|--- FAIL|rc=" "$OUT/conformance.log"
timeout 120 carry/root.test -test.v >"$OUT/root.log" 2>&1; echo "root tests rc=$?"
timeout 240 carry/fusednorm-bench -cases shaders -probe=false -reps 5 -min-time 0.2s -json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -16 "$OUT/bench.txt"
