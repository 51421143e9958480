#!/usr/bin/env bash
# check-generated.sh fails when cpu/kernels_amd64.s is not what internal/cmd/asmgen
# generates now: someone edited the assembly by hand or changed the generator without
# running `go generate ./cpu`. Run from anywhere inside the repository.
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go run -C "$root/internal/cmd/asmgen" . -out "$tmp/kernels_amd64.s"
if ! diff -u "$root/cpu/kernels_amd64.s" "$tmp/kernels_amd64.s"; then
	echo "cpu/kernels_amd64.s is stale: run 'go generate ./cpu' and commit the result" >&2
	exit 1
fi
echo "cpu/kernels_amd64.s is up to date"
