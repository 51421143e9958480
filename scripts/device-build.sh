#!/usr/bin/env bash
# Builds what a GPU machine without Go or network needs, into carry/ (git-ignored): the
# conformance suite, the root package's and the cpu package's tests as test binaries, the
# benchmark, the call-path counter (scripts/call-files.sh), the runtime's transfer benchmark,
# the C tiny-dispatch benchmark and torch's anchor script. Then
# carry carry/, third_party/dawn, third_party/env.sh and .gl (Vulkan loader and glvnd debs,
# see the device tool's README) and run scripts/device-run.sh there.
# With OLD=<rev> it also builds that revision's benchmark and root tests into carry/old/,
# for `device-run.sh paired` (the new main against OLD in one device call).
# With ORT=1 it also packs carry/ort.tar.xz: Node.js, the oracle with onnxruntime-node's
# Linux x64 library only, and its stream probe built static, for `device-run.sh ort` (that
# machine has neither Node.js nor a network). Carry carry/fusednorm-bench and that file; for
# `device-run.sh webgpu` (ORT's WebGPU EP beside Dawn) also third_party/dawn and .gl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/provision.sh
if [ ! -d .gl ] || [ -z "$(ls .gl/*.deb 2>/dev/null)" ]; then
	mkdir -p .gl /tmp/amd64/partial
	o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
	apt-get $o update >/dev/null
	(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
mkdir -p carry
# A stale hash of the C files would let a cached object of the old C into the binaries.
go run ./internal/cmd/cgohash -check internal/dawnrt
go run ./internal/cmd/cgohash -check cmd/fusednorm-bench/internal/twin
go test -c -ldflags='-s -w' -o carry/conformance.test ./tests
go test -c -ldflags='-s -w' -o carry/root.test .
go test -c -ldflags='-s -w' -o carry/cpu.test ./internal/cpu
go test -c -ldflags='-s -w' -o carry/dawnrt.test ./internal/dawnrt
go build -ldflags='-s -w' -o carry/fusednorm-bench ./cmd/fusednorm-bench
# The files one host-tensor AddLayerNorm visits on the GPU machine's auto engine.
bash scripts/call-files.sh build && cp build/callfiles carry/
# The tiny-dispatch benchmark's C twin and the WGSL it loads, and torch's anchor script.
(set -a; source third_party/env.sh; set +a
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build --target tiny_bench >/dev/null)
go run ./cmd/fusednorm-bench -tiny-wgsl carry/tiny
cp build/tiny_bench tools/anchors/gpu_anchor.py carry/
if [ -n "${OLD:-}" ]; then
	old=$(mktemp -d)
	git worktree add --detach "$old" "$OLD" >/dev/null
	mkdir -p carry/old
	# The transfer benchmark's package: internal/dawnrt since the one executor, dawn before.
	xfer=./internal/dawnrt
	[ -d "$old/internal/dawnrt" ] || xfer=./dawn
	(cd "$old" && go build -ldflags='-s -w' -o "$OLDPWD/carry/old/fusednorm-bench" ./cmd/fusednorm-bench &&
		go test -c -ldflags='-s -w' -o "$OLDPWD/carry/old/root.test" . &&
		go test -c -ldflags='-s -w' -o "$OLDPWD/carry/old/transfer.test" "$xfer")
	git worktree remove --force "$old"
	echo "$OLD" >carry/old/REV
fi
ls -la carry
if [ "${ORT:-}" = 1 ]; then
	make "$PWD/build/oracle/node_modules" >/dev/null
	pack=$(mktemp -d)
	mkdir -p "$pack/bin" "$pack/oracle"
	# Node stripped of its debug info (99 MB to 86), the packages from build/oracle without
	# the other systems' libraries and protobufjs's command-line tools, the scripts from
	# tools/oracle as they are now (build/oracle is made again only when the lock file
	# changes): 34 MiB packed, so that with carry/fusednorm-bench, third_party/dawn and .gl
	# it stays under the device's 64 MiB of carried files (device-run.sh webgpu).
	strip -o "$pack/bin/node" "$(command -v node)" 2>/dev/null || cp "$(command -v node)" "$pack/bin/node"
	(cd build/oracle && tar cf - --exclude='bin/napi-v6/darwin' --exclude='bin/napi-v6/win32' \
		--exclude='bin/napi-v6/linux/arm64' --exclude='protobufjs/cli' node_modules) | tar xf - -C "$pack/oracle"
	(cd tools/oracle && tar cf - --exclude=node_modules --exclude=models --exclude=bench/stream .) | tar xf - -C "$pack/oracle"
	gcc -O3 -march=x86-64-v3 -fopenmp -static -o "$pack/oracle/bench/stream" "$pack/oracle/bench/stream.c" 2>/dev/null
	tar cf - -C "$pack" bin oracle | xz -T0 -6 >carry/ort.tar.xz
	rm -rf "$pack"
	ls -la carry/ort.tar.xz
	du -cb carry/fusednorm-bench carry/ort.tar.xz third_party/dawn third_party/env.sh .gl |
		awk 'END { printf "carry for device-run.sh webgpu (carry/fusednorm-bench carry/ort.tar.xz third_party/dawn third_party/env.sh .gl): %.1f MiB of 64\n", $1 / 1048576 }'
fi
