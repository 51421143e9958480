#!/usr/bin/env bash
# Builds what a GPU machine without Go or network needs, into carry/ (git-ignored): the
# conformance suite, the root package's and the cpu package's tests as test binaries, and
# the benchmark. Then
# carry carry/, third_party/dawn, third_party/env.sh and .gl (Vulkan loader and glvnd debs,
# see the device tool's README) and run scripts/device-run.sh there.
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
go test -c -ldflags='-s -w' -o carry/conformance.test ./tests
go test -c -ldflags='-s -w' -o carry/root.test .
go test -c -ldflags='-s -w' -o carry/cpu.test ./cpu
go build -ldflags='-s -w' -o carry/fusednorm-bench ./cmd/fusednorm-bench
ls -la carry
