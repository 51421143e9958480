#!/usr/bin/env bash
# Paired CPU A/B of the benchmark: a base commit against the working tree (and other
# builds, "arms"), case by case.
#   scripts/cpu-ab.sh build BASE   here: builds carry/ab/fnb-base (BASE, with the bench cases
#                                  of its tree in carry/ab/base-cases) and carry/ab/fnb-head
#                                  (the working tree). Carry carry/ab to the machine to time.
#   scripts/cpu-ab.sh arm NAME REV here: builds carry/ab/fnb-NAME from REV (a commit or
#                                  branch; it runs the head's bench cases), a further arm.
#   scripts/cpu-ab.sh run          there (or here): R rounds (default 4) over the cases (CASES,
#                                  default every bench.json case) for the builds in ARMS
#                                  (default "base head"; at most four, and two on a machine
#                                  of fewer than 16 cores). One thread: every arm runs the
#                                  case AT THE SAME TIME, each pinned to two physical cores
#                                  of its own (one on small machines; sides drawn at random
#                                  each round), so a neighbour's load on a shared machine
#                                  hits them alike. All threads (TH, default nproc): one
#                                  arm after the other on the case, in a random order each
#                                  round. Writes $OUT/ab.tgz (every run's -json and output)
#                                  after every round, so a run cut short keeps its rounds.
#   scripts/cpu-ab.sh report DIR [NUM [DEN]]
#                                  the rounds' ratios NUM/DEN (default head/base) from an
#                                  unpacked ab.tgz: per case and thread count, the geometric
#                                  mean of the per-round ratios of min times with its ±2
#                                  standard errors, the median of the per-round ratios of
#                                  median times, and every round's min ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
A=carry/ab
case "${1:-}" in
build)
	base=${2:?usage: scripts/cpu-ab.sh build BASE}
	mkdir -p $A
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$base"
	(cd "$wt" && go build -ldflags='-s -w' -o "$OLDPWD/$A/fnb-base" ./cmd/fusednorm-bench)
	rm -rf $A/base-cases
	cases=$wt/internal/cases
	[ -d "$cases" ] || cases=$wt/shaders # before the cases moved to internal/cases
	for f in "$cases"/*/bench.json; do
		mkdir -p "$A/base-cases/$(basename "$(dirname "$f")")"
		cp "$f" "$A/base-cases/$(basename "$(dirname "$f")")/"
	done
	git worktree remove --force "$wt"
	go build -ldflags='-s -w' -o $A/fnb-head ./cmd/fusednorm-bench
	ls -la $A
	;;
arm)
	name=${2:?usage: scripts/cpu-ab.sh arm NAME REV} rev=${3:?usage: scripts/cpu-ab.sh arm NAME REV}
	mkdir -p $A
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$rev"
	(cd "$wt" && go build -ldflags='-s -w' -o "$OLDPWD/$A/fnb-$name" ./cmd/fusednorm-bench)
	git worktree remove --force "$wt"
	ls -la $A
	;;
run)
	OUT=${OUT:-/tmp/out}
	mkdir -p "$OUT"
	res=$(mktemp -d)
	lscpu | grep -E "Model name|Thread|Core|Socket" | tee "$res/cpu.txt"
	mapfile -t c < <(lscpu -p=CPU,CORE | grep -v '#' | sort -t, -k2,2n -u | cut -d, -f1)
	if [ ${#c[@]} -ge 16 ]; then sides=("${c[1]},${c[2]}" "${c[5]},${c[6]}" "${c[9]},${c[10]}" "${c[13]},${c[14]}")
	elif [ ${#c[@]} -ge 8 ]; then sides=("${c[1]},${c[2]}" "${c[5]},${c[6]}")
	else sides=("${c[0]}" "${c[${#c[@]}-1]}"); fi
	read -r -a arms <<<"${ARMS:-base head}"
	[ ${#arms[@]} -le ${#sides[@]} ] || { echo "at most ${#sides[@]} arms on this machine" >&2; exit 2; }
	cases=${CASES:-"eln-b8-s512-h768-f32 eln-b64-s512-h1024-f32 eln-b256-s512-h4096-f32 eln-b8-s512-h768-f16 eln-b64-s512-h1024-f16 eln-b256-s512-h4096-f16 addln-n4096-d768-f32 addln-n16384-d4096-f32 addln-n65536-d8192-f32 addln-n4096-d768-f16 addln-n16384-d4096-f16 addln-n65536-d8192-f16"}
	bin() { if [ "$1" = base ]; then echo "$A/fnb-base -cases $A/base-cases"; else echo "$A/fnb-$1"; fi; }
	one() { # build threads case out [cpus]
		local pre=""
		[ -n "${5:-}" ] && pre="taskset -c $5"
		timeout 150 $pre $(bin "$1") -backend cpu -threads "$2" -probe=false -only "$3" -reps 3 -min-time 0.25s -json "$4.json" >"$4.txt" 2>&1 || true
	}
	for r in $(seq "${R:-4}"); do
		for k in $(shuf -e $cases); do
			mapfile -t drawn < <(shuf -e "${sides[@]}")
			for i in "${!arms[@]}"; do one "${arms[$i]}" 1 "$k" "$res/t1-${arms[$i]}-$k-$r" "${drawn[$i]}" & done
			wait
			for v in $(shuf -e "${arms[@]}"); do one "$v" "${TH:-$(nproc)}" "$k" "$res/tN-$v-$k-$r"; done
		done
		tar czf "$OUT/ab.tgz" -C "$res" .
		echo "round $r done"
	done
	;;
report)
	python3 - "${2:?usage: scripts/cpu-ab.sh report DIR [NUM [DEN]]}" "${3:-head}" "${4:-base}" <<'PY'
import glob, json, math, os, statistics as st, sys
d, num, den = sys.argv[1:4]
def get(f):
    try:
        r = json.load(open(f))["results"][0]
        return r["median_ms"], r["min_ms"]
    except Exception:
        return None
for th, label in (("t1", "one thread"), ("tN", "all threads")):
    print(label, f"({num}/{den})")
    cases = sorted({os.path.basename(f)[len(f"{th}-{den}-"):].rsplit("-", 1)[0] for f in glob.glob(f"{d}/{th}-{den}-*.json")})
    for c in cases:
        med, mn = [], []
        for f in sorted(glob.glob(f"{d}/{th}-{den}-{c}-*.json")):
            r = f.rsplit("-", 1)[1][:-5]
            b, h = get(f), get(f"{d}/{th}-{num}-{c}-{r}.json")
            if b and h:
                med.append(h[0] / b[0])
                mn.append(h[1] / b[1])
        if len(mn) < 2:
            continue
        l = [math.log(x) for x in mn]
        m, se = sum(l) / len(l), st.stdev(l) / math.sqrt(len(l))
        print(f"  {c:26s} n={len(mn)} min-ratio {math.exp(m):.3f} [{math.exp(m - 2 * se):.3f}, {math.exp(m + 2 * se):.3f}]"
              f"  median-ratio {st.median(med):.3f}  rounds {' '.join(f'{x:.2f}' for x in mn)}")
PY
	;;
*)
	sed -n '2,24p' "$0"
	exit 2
	;;
esac
