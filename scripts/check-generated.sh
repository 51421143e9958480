#!/usr/bin/env bash
# check-generated.sh fails when cpu/kernels_amd64.s, its declarations in
# cpu/kernels_amd64.go or its tables in cpu/vectables_amd64.go are not what internal/cmd/asmgen generates now: someone edited the assembly by hand or changed the generator without
# running `go generate ./cpu`; likewise cgo/webgpu_gen.h and dawn/zdawn_gen.go against
# internal/cmd/dawnhdr. It runs the generator's own tests first. Run from anywhere inside the
# repository.
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go test -C "$root/internal/cmd/asmgen" ./...
go run -C "$root/internal/cmd/asmgen" . -out "$tmp/kernels_amd64.s" -stubs "$tmp/kernels_amd64.go" -tables "$tmp/vectables_amd64.go"
for f in kernels_amd64.s kernels_amd64.go vectables_amd64.go; do
	if ! diff -u "$root/cpu/$f" "$tmp/$f"; then
		echo "cpu/$f is stale: run 'go generate ./cpu' and commit the result" >&2
		exit 1
	fi
done
echo "cpu/kernels_amd64.s, cpu/kernels_amd64.go and cpu/vectables_amd64.go are up to date"

# Dawn's declarations, from the dawn.json committed beside internal/cmd/dawnhdr.
go run -C "$root" ./internal/cmd/dawnhdr -h "$tmp/webgpu_gen.h" -go "$tmp/zdawn_gen.go"
for f in cgo/webgpu_gen.h dawn/zdawn_gen.go; do
	if ! diff -u "$root/$f" "$tmp/$(basename "$f")"; then
		echo "$f is stale: run 'go generate ./dawn' and commit the result" >&2
		exit 1
	fi
done
echo "cgo/webgpu_gen.h and dawn/zdawn_gen.go are up to date"
