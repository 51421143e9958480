#!/usr/bin/env bash
# Lists the library's Go files one host-tensor AddLayerNorm visits (internal/cmd/callfiles):
# builds the program with coverage, runs it (the engine as FUSEDNORM_BACKEND and the Dawn
# environment say), and prints each file with statements the call ran, then their count.
#   scripts/call-files.sh [build|count DIR]   build: only build build/callfiles (to carry to
#   a GPU machine and run there with -out DIR, GOCOVERDIR elsewhere); count DIR: count a run's
#   counters.
set -eu
cd "$(dirname "$0")/.."
mod=github.com/fusednorm/fusednorm
build() { go build -cover -covermode=atomic -coverpkg=$mod/... -o build/callfiles ./internal/cmd/callfiles; }
count() {
	go tool covdata textfmt -i "$1" -o "$1/cover.txt"
	# Lines "file:l.c,l.c statements count": a file counts when one of its blocks ran.
	awk 'NR > 1 && $NF > 0 { split($1, f, ":"); print f[1] }' "$1/cover.txt" | sed "s|^$mod/||" |
		grep -v '^internal/cmd/callfiles/' | sort | uniq -c | sort -k2 | awk '{ print $2 } END { print NR " files" }'
}
case "${1:-}" in
build) build ;;
count) count "$2" ;;
*)
	build
	# GOCOVERDIR takes the counters the program writes at exit (Close and all); -out the
	# one call's.
	dir=$(mktemp -d) && mkdir "$dir/exit" "$dir/call"
	GOCOVERDIR=$dir/exit build/callfiles -out "$dir/call"
	count "$dir/call"
	rm -rf "$dir"
	;;
esac
