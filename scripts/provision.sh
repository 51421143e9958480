#!/usr/bin/env bash
# Provision the native pieces the Dawn backend needs, under third_party/ (git-ignored):
#   third_party/dawn/libwebgpu_wrapper.so   Dawn, from the npm package bun-webgpu-linux-x64
#                                           (fetched and hash-checked by cmd/fusednorm-dawn)
#   third_party/lavapipe/                   Mesa's CPU Vulkan driver, only on GPU-less machines
#   third_party/env.sh                      export lines the Makefile and CI source
# and make sure the system has the Vulkan loader (libvulkan1) and cmake.
#
# Idempotent: a second run checks hashes and versions and downloads nothing. apt waits up to
# 5 minutes for a lock another process holds.
# Usage: scripts/provision.sh [--dawn-only | --no-cmake] [--force-lavapipe | --no-lavapipe] [--vulkan-loader]
#   --dawn-only      Dawn and env.sh only: no apt, no lavapipe (e.g. a GPU machine set up already)
#   --no-cmake       everything but cmake (what running Dawn needs; cmake only builds the C test)
#   --vulkan-loader  also unpack libvulkan1 into third_party/vulkan/ (for a machine that has a
#                    GPU driver but no Vulkan loader and no network: provision here, carry over)
set -euo pipefail

DAWN_NPM_PKG="bun-webgpu-linux-x64@0.1.7"
DAWN_SHA256="3190c3777f2c07fcf6a0640833cbf5d0cde859dc53aed6d9083946d093198788"
# Bookworm's own lavapipe (Mesa 22) lacks features Dawn requires; the backports one works.
LVP_PKG="mesa-vulkan-drivers"
LVP_VERSION="25.0.7-2~bpo12+1"
LVP_SUITE="bookworm-backports"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TP="$ROOT/third_party"
DAWN_DIR="$TP/dawn"
DAWN_LIB="$DAWN_DIR/libwebgpu_wrapper.so"
LVP_DIR="$TP/lavapipe"
LVP_ICD="$LVP_DIR/lvp_icd.x86_64.json"
ENV_FILE="$TP/env.sh"

lavapipe_mode=auto
local_loader=0
system=1
cmake=1
for arg in "$@"; do
	case "$arg" in
	--dawn-only) system=0 lavapipe_mode=off ;;
	--no-cmake) cmake=0 ;;
	--vulkan-loader) local_loader=1 ;;
	--force-lavapipe) lavapipe_mode=force ;;
	--no-lavapipe) lavapipe_mode=off ;;
	-h | --help)
		sed -n '2,16p' "$0"
		exit 0
		;;
	*)
		echo "provision: unknown argument: $arg" >&2
		exit 2
		;;
	esac
done

step=""
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "provision: FAILED at step: ${step:-setup} (exit $rc)" >&2; fi' EXIT

log() { echo "provision: $*"; }
die() {
	echo "provision: $step: $*" >&2
	exit 1
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run: $*"
	fi
}

# Wait (bounded) for the dpkg and lists locks when another process holds them.
APT_LOCK=(-o DPkg::Lock::Timeout=300)
apt_updated=0
apt_install() {
	if [ $apt_updated -eq 0 ]; then
		as_root apt-get "${APT_LOCK[@]}" update -qq || die "apt-get update failed"
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive as_root apt-get "${APT_LOCK[@]}" install -y -qq --no-install-recommends "$@" ||
		die "apt-get install $* failed"
}

mkdir -p "$TP"

# --- 1. Dawn ---------------------------------------------------------------------------------
step="dawn"
if [ -f "$DAWN_LIB" ] && [ "$(sha256_of "$DAWN_LIB")" = "$DAWN_SHA256" ]; then
	log "dawn: present, sha256 ok ($DAWN_LIB)"
else
	log "dawn: fetching $DAWN_NPM_PKG (go run ./cmd/fusednorm-dawn)"
	(cd "$ROOT" && "${GO:-go}" run ./cmd/fusednorm-dawn -q -dir "$DAWN_DIR" >/dev/null) ||
		die "go run ./cmd/fusednorm-dawn failed"
	got="$(sha256_of "$DAWN_LIB")"
	[ "$got" = "$DAWN_SHA256" ] || die "sha256 mismatch: got $got, want $DAWN_SHA256 (cmd/fusednorm-dawn pins another)"
	log "dawn: installed $DAWN_LIB"
fi

# --- 2. Vulkan loader and cmake --------------------------------------------------------------
step="system packages"
have_vulkan_loader() {
	ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '
}
missing=()
if [ $system -eq 1 ]; then
	have_vulkan_loader || missing+=(libvulkan1)
	[ $cmake -eq 0 ] || command -v cmake >/dev/null 2>&1 || missing+=(cmake)
fi
if [ ${#missing[@]} -gt 0 ]; then
	log "system: installing ${missing[*]}"
	apt_install "${missing[@]}"
elif [ $system -eq 1 ]; then
	log "system: the Vulkan loader$([ $cmake -eq 1 ] && echo ' and cmake') present"
fi

# --- 3. lavapipe (GPU-less machines only) ----------------------------------------------------
step="lavapipe"
need_lavapipe=0
case "$lavapipe_mode" in
force) need_lavapipe=1 ;;
off) need_lavapipe=0 ;;
auto)
	# A GPU Vulkan driver is present when the NVIDIA tools or an NVIDIA ICD exist.
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
		need_lavapipe=0
	elif ls /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json >/dev/null 2>&1; then
		need_lavapipe=0
	else
		need_lavapipe=1
	fi
	;;
esac

lvp_so="$LVP_DIR/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
lvp_stamp="$LVP_DIR/.version"
if [ $need_lavapipe -eq 1 ]; then
	if [ -f "$lvp_so" ] && [ -f "$lvp_stamp" ] && [ "$(cat "$lvp_stamp")" = "$LVP_VERSION" ]; then
		log "lavapipe: present ($LVP_VERSION)"
	else
		[ -r /etc/apt/sources.list.d/debian.sources ] ||
			die "/etc/apt/sources.list.d/debian.sources not found: cannot tell which Debian mirror to use"
		# The first URI of the stanza that serves the plain bookworm suite.
		mirror="$(awk '
			/^URIs:/ { uri = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print uri; exit } }
			/^$/ { uri = "" }' /etc/apt/sources.list.d/debian.sources)"
		[ -n "$mirror" ] || die "no URI serving suite bookworm in /etc/apt/sources.list.d/debian.sources"
		keyring="$(awk -v m="$mirror" '
			/^URIs:/ { uri = $2 }
			/^Signed-By:/ { if (uri == m) { print $2; exit } }' /etc/apt/sources.list.d/debian.sources)"
		keyring="${keyring:-/usr/share/keyrings/debian-archive-keyring.gpg}"
		arch="$(dpkg --print-architecture)"
		[ "$arch" = amd64 ] || die "lavapipe provisioning supports amd64 only (this is $arch)"

		# A private apt state: its own sources, lists and cache; the system's apt is untouched.
		state="$TP/.apt"
		rm -rf "$state"
		mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/etc/sources.list.d" \
			"$state/etc/preferences.d" "$state/etc/apt.conf.d" "$state/debs"
		cat >"$state/etc/sources.list.d/backports.sources" <<-EOF
			Types: deb
			URIs: $mirror
			Suites: $LVP_SUITE
			Components: main
			Signed-By: $keyring
		EOF
		: >"$state/etc/sources.list"
		aptopts=(
			-o "Dir::Etc::SourceList=$state/etc/sources.list"
			-o "Dir::Etc::SourceParts=$state/etc/sources.list.d"
			-o "Dir::Etc::Preferences=$state/etc/preferences"
			-o "Dir::Etc::PreferencesParts=$state/etc/preferences.d"
			-o "Dir::State::Lists=$state/lists"
			-o "Dir::State::status=/var/lib/dpkg/status"
			-o "Dir::Cache=$state/cache"
			-o "Dir::Cache::archives=$state/cache/archives"
			-o "APT::Architecture=$arch"
			-o "Debug::NoLocking=1"
			-o "APT::Sandbox::User=root"
		)
		log "lavapipe: apt-get update ($LVP_SUITE, private state)"
		apt-get "${APT_LOCK[@]}" "${aptopts[@]}" update -qq || die "apt-get update of $LVP_SUITE failed"
		log "lavapipe: apt-get download $LVP_PKG=$LVP_VERSION"
		(cd "$state/debs" && apt-get "${aptopts[@]}" download "$LVP_PKG=$LVP_VERSION") ||
			die "apt-get download $LVP_PKG=$LVP_VERSION failed"
		deb="$(ls "$state"/debs/*.deb 2>/dev/null | head -n1)"
		[ -n "$deb" ] || die "apt-get download produced no .deb"
		rm -rf "$LVP_DIR"
		mkdir -p "$LVP_DIR"
		dpkg -x "$deb" "$LVP_DIR" || die "dpkg -x $deb failed"
		[ -f "$lvp_so" ] || die "$deb holds no usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
		echo "$LVP_VERSION" >"$lvp_stamp"
		rm -rf "$state"
		log "lavapipe: unpacked into $LVP_DIR"
	fi
	# Our own ICD manifest: the one in the .deb names a system path. A relative library_path is
	# resolved against the manifest's folder, so third_party/ can move with the checkout.
	cat >"$LVP_ICD.tmp" <<-EOF
		{
		    "file_format_version": "1.0.0",
		    "ICD": {
		        "library_path": "./usr/lib/x86_64-linux-gnu/libvulkan_lvp.so",
		        "api_version": "1.3.0"
		    }
		}
	EOF
	if [ -f "$LVP_ICD" ] && cmp -s "$LVP_ICD" "$LVP_ICD.tmp"; then
		rm -f "$LVP_ICD.tmp"
	else
		mv -f "$LVP_ICD.tmp" "$LVP_ICD"
	fi
elif [ "$lavapipe_mode" = off ]; then
	log "lavapipe: skipped"
else
	log "lavapipe: not needed (GPU Vulkan driver present)"
fi

# --- 4. portable Vulkan loader (optional) ----------------------------------------------------
step="vulkan loader"
loader_dir="$TP/vulkan"
if [ $local_loader -eq 1 ]; then
	if [ -e "$loader_dir/usr/lib/x86_64-linux-gnu/libvulkan.so.1" ]; then
		log "vulkan loader: present ($loader_dir)"
	else
		tmp="$(mktemp -d)"
		if ! (cd "$tmp" && apt-get -qq -o APT::Sandbox::User=root download libvulkan1); then
			as_root apt-get "${APT_LOCK[@]}" update -qq || die "apt-get update failed"
			(cd "$tmp" && apt-get -qq -o APT::Sandbox::User=root download libvulkan1) ||
				die "apt-get download libvulkan1 failed"
		fi
		rm -rf "$loader_dir"
		mkdir -p "$loader_dir"
		dpkg -x "$tmp"/libvulkan1_*.deb "$loader_dir" || die "dpkg -x libvulkan1 failed"
		rm -rf "$tmp"
		log "vulkan loader: unpacked into $loader_dir"
	fi
fi

# --- 5. env.sh -------------------------------------------------------------------------------
step="env.sh"
# Paths are found when sourced, not baked in, so a checkout carried to another machine (e.g. a
# GPU host) still works; lavapipe is chosen only where no NVIDIA driver answers.
cat >"$ENV_FILE.tmp" <<'EOF'
# Generated by scripts/provision.sh. Source it from the repository root (bash: from anywhere).
if [ -n "${BASH_SOURCE:-}" ]; then _fn_tp=$(cd "$(dirname "$BASH_SOURCE")" && pwd); else _fn_tp="$PWD/third_party"; fi
export FUSEDNORM_DAWN_LIB="$_fn_tp/dawn/libwebgpu_wrapper.so"
if [ -f "$_fn_tp/lavapipe/lvp_icd.x86_64.json" ] && ! nvidia-smi -L >/dev/null 2>&1; then
	export VK_ICD_FILENAMES="$_fn_tp/lavapipe/lvp_icd.x86_64.json"
fi
if [ -e "$_fn_tp/vulkan/usr/lib/x86_64-linux-gnu/libvulkan.so.1" ]; then
	export LD_LIBRARY_PATH="$_fn_tp/vulkan/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
	export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/xdg-runtime-$(id -u)"
	mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
fi
unset _fn_tp
EOF
if [ -f "$ENV_FILE" ] && cmp -s "$ENV_FILE" "$ENV_FILE.tmp"; then
	rm -f "$ENV_FILE.tmp"
	log "env: $ENV_FILE up to date"
else
	mv -f "$ENV_FILE.tmp" "$ENV_FILE"
	log "env: wrote $ENV_FILE"
fi
step=""
log "done"
