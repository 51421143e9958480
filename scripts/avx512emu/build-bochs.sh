#!/usr/bin/env bash
# build-bochs.sh — build the Bochs that run.sh uses into $AVX512EMU_WORK/cache and print the
# path of its binary. Idempotent: a second run finds the build and does nothing.
#
#   scripts/avx512emu/build-bochs.sh      # -> /tmp/avx512emu/cache/bochs-3.0-<hash>/bochs
#
# Why not Debian bookworm's bochs 2.7: its VCVTPS2PH rounds binary16 ties away from zero.
# In cpu/fpu/softfloat-round-pack.cc, roundAndPackFloat16 (which float32_to_float16 calls
# for the VEX and EVEX forms alike, with the imm8 rounding mode) clears the low bit on a
# tie with "zSigRound &= ~(((roundBits ^ 0x10) == 0) & roundNearestEven)", but roundBits
# is zSig & 0xF and never 0x10: an exact tie (roundBits == 8) always rounds up in
# magnitude, where IEEE round-to-nearest-even goes to the even neighbour. Upstream fixed
# it in 2.8 ("roundBits ^ 8", then softfloat3e's softfloat_roundPackToF16). Bookworm's
# source can not be fetched here (its orig tarball is not on the mirror), so this builds
# the bochs 3.0 source of Debian trixie, which has the fix. The Debian build also starts
# in its debugger and has no nogui display; this one has neither debugger nor display,
# sound, USB or network, and the optimizations on.
#
# One patch: the sapphire_rapids CPU model (the one with AVX512-FP16, which run.sh
# emulates) loses 5-level paging (LA57). With it, a guest kernel that turns LA57 on stops
# Bochs at its first SMI: "SMM restore: CR4 consistency check failed" (restoring CR4
# with LA57 set fails the check that a MOV to CR4 in long mode must pass). Nothing here
# needs 57-bit addresses.
#
# Facts (Debian bookworm, 2-core EPYC): a cold build takes 2 min 15 s, apt-get update and
# download 8 s, configure 12 s, make -j2 1 min 53 s (2 min 50 s with gcc's default -g).
# g++, make and xz-utils come with the image here; the script installs them if not.
# Debian's bochsbios and vgabios packages (run.sh installs them) provide the BIOS.
#
# Environment: AVX512EMU_WORK (scratch + cache dir, default /tmp/avx512emu). Needs root
# (apt-get) on Debian.
set -euo pipefail

VER=3.0
TARBALL=bochs_3.0+dfsg.orig.tar.xz
SHA256=78f6c73d4a6472d5130a87ab9dc306d02c7c71ed8e25b3a8ef642e2a7acd282b
CONFIGURE=(
	--enable-x86-64 --enable-cpu-level=6 --enable-avx --enable-evex # sapphire_rapids
	--enable-all-optimizations --disable-stats --disable-show-ips
	--with-nogui --disable-debugger --disable-plugins --disable-docbook
)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=${AVX512EMU_WORK:-/tmp/avx512emu}
T0=$(date +%s)
log() { echo "build-bochs: [$(($(date +%s) - T0))s] $*" >&2; }

# The cache dir is named after this script's hash: a change here builds anew.
key=$(sha256sum "$HERE/build-bochs.sh" | cut -c1-12)
DEST=$WORK/cache/bochs-$VER-$key
if [ -x "$DEST/bochs" ]; then
	echo "$DEST/bochs"
	exit 0
fi
mkdir -p "$WORK/cache"

missing=""
for p in g++ make xz-utils; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	log "installing$missing"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The source tarball, from the pool directory of the bochs package on apt's own mirror.
B=$WORK/bochs-build
rm -rf "$B"
mkdir -p "$B"
uri=$(apt-get download --print-uris bochs 2>/dev/null | head -1 | cut -d"'" -f2 || true)
if [ -z "$uri" ]; then
	apt-get update -qq
	uri=$(apt-get download --print-uris bochs | head -1 | cut -d"'" -f2)
fi
log "downloading $TARBALL"
if ! /usr/lib/apt/apt-helper download-file "${uri%/*}/$TARBALL" "$B/$TARBALL" "SHA256:$SHA256" >"$B/download.log" 2>&1; then
	cat "$B/download.log" >&2
	exit 1
fi
tar -xf "$B/$TARBALL" -C "$B"
model=$B/bochs-$VER/cpu/cpudb/intel/sapphire_rapids.cc
grep -q '^  enable_cpu_extension(BX_ISA_LA57);$' "$model" || { echo "build-bochs: no LA57 line to drop in $model" >&2; exit 1; }
sed -i '/^  enable_cpu_extension(BX_ISA_LA57);$/d' "$model"

log "configuring"
mkdir -p "$B/obj"
cd "$B/obj"
CFLAGS=-O2 CXXFLAGS=-O2 "$B/bochs-$VER/configure" "${CONFIGURE[@]}" >configure.log 2>&1 ||
	{ tail -20 configure.log >&2; exit 1; }
log "building (make -j$(nproc))"
make -j"$(nproc)" >make.log 2>&1 || { tail -30 make.log >&2; exit 1; }

rm -rf "$WORK"/cache/bochs-*
mkdir -p "$DEST.tmp"
strip -o "$DEST.tmp/bochs" bochs
mv "$DEST.tmp" "$DEST"
cd /
rm -rf "$B"
log "installed $DEST/bochs"
echo "$DEST/bochs"
