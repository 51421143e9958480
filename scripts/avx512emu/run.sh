#!/usr/bin/env bash
# run.sh — run a static linux/amd64 binary (e.g. a Go test binary built with CGO_ENABLED=0)
# on an emulated AVX-512 CPU, on a machine that has none.
#
#   scripts/avx512emu/run.sh /tmp/cpu.test -test.run 'Kernel|Level' -test.short -test.v
#
# How: Bochs (3.0, built by build-bochs.sh from Debian's source) emulates a sapphire_rapids
# CPU (AVX-512 F/CD/BW/DQ/VL and FP16, AVX2, FMA, F16C) and boots Debian's 6.12 cloud
# kernel, linux-image-6.12-cloud-amd64 from bookworm-security (LZ4-compressed, so it
# unpacks in seconds inside the emulator) from an ISO made
# with isolinux + xorriso. The initramfs holds a tiny Go init (guestinit/) and the
# binary (and the files named in AVX512EMU_FILES); init runs it, prints "AVX512EMU: EXIT
# <code>" on the serial console and powers the guest off. This script streams the serial
# console and exits with the binary's code.
#
# Facts this depends on (found by trial, Debian bookworm, first with its bochs 2.7):
#  - QEMU TCG (7.2 and 10.0) has no AVX-512 at all, hence Bochs.
#  - Debian's bochs 2.7 rounds binary16 ties wrongly in VCVTPS2PH (see build-bochs.sh),
#    starts in its debugger and has no "nogui" display; the 3.0 build has none of that.
#  - bochs 2.7 reports a wrong CPUID.(EAX=0DH,ECX=1).EBX (standard, not compacted size),
#    so Linux's XSAVE paranoia check fails and it turns XSAVE (and with it AVX) off,
#    unless the kernel is told "clearcpuid=xsaves,xsavec" (standard XSAVE format). 3.0
#    boots with AVX-512 without it; it stays, harmless.
#  - the bx_generic CPU can not report CPUID leaf 7 (no AVX2/AVX-512 bits) in 2.7, and
#    the tigerlake model hangs the kernel; corei7_skylake_x works, but has no AVX512-FP16.
#  - sapphire_rapids (3.0) hangs bookworm's 6.1 kernel early in its boot (after "LSM:
#    Security Framework initializing"; clearcpuid=waitpkg,serialize,pku,umip, ibt=off,
#    idle=nomwait, nolapic_timer and lapic=notscdeadline did not help). The 6.12 kernel
#    boots, once the model has no LA57 (build-bochs.sh drops it: with it Bochs stops on
#    "SMM restore: CR4 consistency check failed").
#  - the guest powers off through ACPI, which Bochs reports as a fatal error: its exit
#    code is 1 on success too.
# Guest clock readings (test durations) are meaningless. On a 2-core EPYC the 3.0 build
# ran the cpu tests at one level in 92 s (skylake_x) where Debian's 2.7 took 245 s; with
# sapphire_rapids, the cpu tests at avx512 and avx512fp16 take 164 s and the conformance
# suite's TestCPU at both levels 276 s, boot and power-off included.
#
# Environment: AVX512EMU_WORK (scratch + cache dir, default /tmp/avx512emu),
# AVX512EMU_TIMEOUT (seconds for the emulator, default 3000), AVX512EMU_MEGS (guest RAM,
# default 2048), AVX512EMU_REQUIRE (default 1: fail with exit 3 when the guest kernel
# does not report avx512f, avx512bw, avx512vl and avx512_fp16), AVX512EMU_FILES
# (space-separated paths relative to the current directory, files or trees, copied into
# the guest at the same paths under /), AVX512EMU_CWD (the binary's working directory in
# the guest, default /tmp).
# Needs root (apt-get) on Debian, and Go to build the init. Idempotent.
set -euo pipefail

if [ $# -lt 1 ]; then
	echo "usage: $0 STATIC-BINARY [ARGS...]" >&2
	exit 2
fi
BIN=$(readlink -f "$1")
shift
[ -x "$BIN" ] || { echo "avx512emu: $BIN is not an executable file" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=${AVX512EMU_WORK:-/tmp/avx512emu}
TMO=${AVX512EMU_TIMEOUT:-3000}
MEGS=${AVX512EMU_MEGS:-2048}
REQUIRE=${AVX512EMU_REQUIRE:-1}
MODEL=sapphire_rapids
KMETA=linux-image-6.12-cloud-amd64
T0=$(date +%s)
log() { echo "avx512emu: [$(($(date +%s) - T0))s] $*" >&2; }

mkdir -p "$WORK/cache"

# 1. Debian packages.
PKGS="bochsbios vgabios isolinux syslinux-common xorriso cpio"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
updated=0
if [ -n "$missing" ]; then
	log "installing$missing"
	apt-get update -qq
	updated=1
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# 2. Bochs itself (cached).
BOCHS=$(AVX512EMU_WORK=$WORK bash "$HERE/build-bochs.sh")

# 3. The guest kernel (Debian's 6.12 cloud kernel, downloaded once into the cache).
KERNEL=$WORK/cache/vmlinuz-6.12
if [ ! -s "$KERNEL" ]; then
	[ $updated = 1 ] || apt-get update -qq
	kpkg=$(apt-cache depends $KMETA | awk '/Depends: linux-image-/ {print $2; exit}')
	[ -n "$kpkg" ] || { echo "avx512emu: cannot resolve $KMETA" >&2; exit 2; }
	log "downloading $kpkg"
	d=$(mktemp -d "$WORK/kdl.XXXXXX")
	(cd "$d" && apt-get download -qq "$kpkg" 2>&1 | grep -v 'unsandboxed' || true)
	dpkg-deb --fsys-tarfile "$d"/"$kpkg"_*.deb | tar -x -C "$d" --wildcards './boot/vmlinuz-*'
	cp "$d"/boot/vmlinuz-* "$KERNEL.tmp" && mv "$KERNEL.tmp" "$KERNEL"
	rm -rf "$d"
fi

# 4. The init program.
INIT=$WORK/cache/init
if [ ! -x "$INIT" ] || [ "$HERE/guestinit/main.go" -nt "$INIT" ]; then
	log "building guest init"
	(cd "$HERE/guestinit" && GOWORK=off GOFLAGS= CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
		go build -trimpath -ldflags=-s -o "$INIT.tmp" . && mv "$INIT.tmp" "$INIT")
fi

# 5. Initramfs + bootable ISO.
RUN=$WORK/run
rm -rf "$RUN"
mkdir -p "$RUN/root/proc" "$RUN/root/sys" "$RUN/root/dev" "$RUN/root/tmp" "$RUN/iso/isolinux"
cp "$INIT" "$RUN/root/init"
cp "$BIN" "$RUN/root/payload"
: >"$RUN/root/payload.args"
for a in "$@"; do printf '%s\n' "$a" >>"$RUN/root/payload.args"; done
for f in ${AVX512EMU_FILES:-}; do
	cp -a --parents "$f" "$RUN/root/"
done
[ -z "${AVX512EMU_CWD:-}" ] || printf '%s\n' "$AVX512EMU_CWD" >"$RUN/root/payload.cwd"
(cd "$RUN/root" && find . | cpio -o -H newc --quiet) >"$RUN/iso/isolinux/initrd.img"
cp "$KERNEL" "$RUN/iso/isolinux/vmlinuz"
cp /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32 "$RUN/iso/isolinux/"
cat >"$RUN/iso/isolinux/isolinux.cfg" <<'EOF'
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL vmlinuz
  INITRD initrd.img
  APPEND console=ttyS0,115200 quiet loglevel=3 mitigations=off clearcpuid=xsaves,xsavec lpj=4800000
EOF
xorriso -as mkisofs -quiet -o "$RUN/boot.iso" -b isolinux/isolinux.bin -c isolinux/boot.cat \
	-no-emul-boot -boot-load-size 4 -boot-info-table "$RUN/iso" 2>/dev/null

cat >"$RUN/bochsrc" <<EOF
megs: $MEGS
cpu: model=$MODEL, count=1, ips=200000000, reset_on_triple_fault=0
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=cdrom, path=boot.iso, status=inserted
boot: cdrom
display_library: nogui
com1: enabled=1, mode=file, dev=serial.txt
log: bochs.log
panic: action=fatal
error: action=ignore
info: action=ignore
clock: sync=none, time0=local
EOF

# 6. Boot, stream the serial console, collect the exit code.
log "booting emulator ($BOCHS, $MODEL)"
cd "$RUN"
: >serial.txt
timeout "$TMO" "$BOCHS" -q -f bochsrc </dev/null >bochs.out 2>&1 &
BPID=$!
tail -n +1 -F --pid=$BPID serial.txt 2>/dev/null | while IFS= read -r line; do
	line=${line%$'\r'}
	printf '%s\n' "$line"
	case $line in
	*"Kernel panic"*) kill $BPID 2>/dev/null || true ;;
	esac
done &
TPID=$!
set +e
wait $BPID
brc=$?
wait $TPID
set -e
log "emulator exited (rc $brc)"

if [ $brc = 124 ]; then
	echo "avx512emu: timed out after ${TMO}s" >&2
	exit 124
fi
flags=$(tr -d '\r' <serial.txt | grep -a '^AVX512EMU: flags:' | tail -1 || true)
if [ "$REQUIRE" = 1 ]; then
	for f in avx512f avx512bw avx512vl avx512_fp16; do
		case " $flags " in
		*" $f "*) ;;
		*)
			echo "avx512emu: guest kernel does not report $f ($flags); see $RUN/serial.txt" >&2
			exit 3
			;;
		esac
	done
fi
code=$(tr -d '\r' <serial.txt | grep -a -o '^AVX512EMU: EXIT [0-9]*' | tail -1 | awk '{print $3}' || true)
if [ -z "$code" ]; then
	echo "avx512emu: no exit marker from the guest; see $RUN/serial.txt, $RUN/bochs.out" >&2
	tail -5 bochs.out >&2 || true
	exit 125
fi
log "payload exit code $code"
exit "$code"
