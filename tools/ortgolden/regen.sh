#!/usr/bin/env bash
# Regenerates tests/testdata/ort: copies the ONNX Runtime oracle (tools/oracle) to a temp dir, installs
# its pinned npm packages there, writes and runs every case, then swaps the result into place.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
oracle_src="$repo/tools/oracle"
dest="$repo/tests/testdata/ort"
[ -f "$oracle_src/ort.js" ] || { echo "regen.sh: no oracle at $oracle_src" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -r "$oracle_src" "$tmp/oracle"
chmod -R u+w "$tmp/oracle"
rm -rf "$tmp/oracle/node_modules" "$tmp/oracle/models"
(cd "$tmp/oracle" && npm ci --ignore-scripts --no-audit --no-fund)
node "$repo/tools/ortgolden/gen.js" --oracle "$tmp/oracle" --out "$tmp/ort"

mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp/ort" "$dest"
echo "regen.sh: $(ls "$dest" | wc -l) cases in $dest ($(du -sb "$dest" | cut -f1) bytes)"
