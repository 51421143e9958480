# fusednorm — every target sets up what it needs (Dawn, and lavapipe on GPU-less machines).
#   make bench   the main job: the benchmark table on the best backend here (CPU without GPU);
#                provisions Dawn only when the backend it runs is Dawn
#   make test    everything CI runs: vet, the CPU-only build and tests, the race detector
#                on the CPU path, the avx512 kernels (emulated where the processor has no
#                AVX-512), the Dawn suite (lavapipe without a GPU), the C layer's native
#                test, generated-code checks

SHELL := /bin/bash
GO ?= go
ENV := third_party/env.sh
# Load the provisioned paths (FUSEDNORM_DAWN_LIB, VK_ICD_FILENAMES) into a recipe.
WITH_ENV := set -a; source $(ENV); set +a;

.PHONY: all provision provision-run bench bench-ort bench-tiny test-tiny test test-cpu check-cross check-tidy test-race test-avx512emu test-dawn test-native check-generated fuzz fuzz-ci clean

all: test

# Idempotent: a second run checks hashes and downloads nothing. provision is everything make
# test needs; provision-run what running Dawn needs (no cmake).
provision:
	bash scripts/provision.sh

provision-run:
	bash scripts/provision.sh --no-cmake

# The backend the bench will run: -backend in BENCHFLAGS, else FUSEDNORM_BACKEND, else auto,
# which is the CPU where no GPU driver answers (auto refuses lavapipe). Only a Dawn run
# provisions anything.
# The table goes to the terminal, the rows to build/bench.json and the roofline to build/bench.svg.
GPU_PRESENT = { nvidia-smi -L || ls /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json; } >/dev/null 2>&1
BENCHOUT := -json build/bench.json -plot build/bench.svg
bench:
	@mkdir -p build
	@backend=$$(printf '%s\n' $(BENCHFLAGS) | awk 'p { print; exit } /^--?backend=/ { sub(/^--?backend=/, ""); print; exit } /^--?backend$$/ { p = 1 }'); \
	backend=$${backend:-$${FUSEDNORM_BACKEND:-auto}}; \
	if [ "$$backend" = auto ] && ! $(GPU_PRESENT); then backend=cpu; fi; \
	if [ "$$backend" = cpu ]; then \
		echo "make bench: the CPU backend runs here; nothing to provision"; \
		$(GO) run ./cmd/fusednorm-bench $(BENCHOUT) $(BENCHFLAGS); \
	else \
		bash scripts/provision.sh --no-cmake || exit 1; \
		$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench $(BENCHOUT) $(BENCHFLAGS); \
	fi

# ONNX Runtime's CPU kernel on the same shapes in the same run, one thread each; the CPU
# backend, so nothing to provision but the harness's npm packages.
ORACLE := $(CURDIR)/build/oracle
bench-ort: $(ORACLE)/node_modules
	$(GO) run ./cmd/fusednorm-bench -backend cpu -threads 1 -ort $(ORACLE) $(BENCHFLAGS)

# A writable copy of tools/oracle (it writes models and a small C program into its folder) with
# its packages installed, made again when its lock file changes.
$(ORACLE)/node_modules: tools/oracle/package-lock.json
	rm -rf $(ORACLE) && mkdir -p build && cp -r tools/oracle $(ORACLE) && chmod -R u+w $(ORACLE)
	cd $(ORACLE) && npm ci --ignore-scripts --no-audit --no-fund >/dev/null

test: check-generated test-cpu test-race test-avx512emu test-dawn test-native test-tiny fuzz-ci
	@echo "make test: all passed"

# The pure-Go build: no cgo, no Dawn; the CPU backend must carry every test on its own.
test-cpu: check-tidy check-cross
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test ./...
	CGO_ENABLED=0 $(GO) test -tags purego ./internal/cpu/ ./tests/

# go.mod and go.sum as go mod tidy leaves them.
check-tidy:
	$(GO) mod tidy -diff

# The library builds with cgo off on 32-bit and non-amd64 targets and other systems, not only here.
CROSS := linux/386 linux/arm linux/arm64 windows/amd64 darwin/arm64
check-cross:
	@for t in $(CROSS); do \
		echo "CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} go build ./..."; \
		CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build ./... || exit 1; \
	done

# The race detector over the CPU backend's worker pool and the API's pooled call state.
test-race:
	$(GO) test -race -short ./internal/cpu/ .

# The AVX-512 levels this processor lacks, against the pure-Go level, under Bochs emulating a
# Sapphire Rapids (scripts/avx512emu; Bochs 3.0 built from Debian's source on first use,
# about 2-3 minutes, then cached): the cpu tests, every output compared bit for bit, then the
# conformance suite's TestCPU against the pure-Go plan under both profiles, with
# tests/testdata copied into the guest. Where the processor has AVX-512 F/BW/VL (the usual
# CI machine), test-cpu has tested the avx512 level natively and only avx512fp16 is
# emulated: 412 s of emulation on a 2-core EPYC where emulating both levels took 807 s.
# With AVX512-FP16 too, test-cpu has run every level natively and nothing is emulated.
# The allocation and worker-pool tests, which do not depend on the level, run natively
# only: under the emulator they took two thirds of the time. -short there keeps
# TestCommonWidthsLevels to the widths nothing divides (the rest of it is whole chunks).
# The flags are those internal/cpu's levels require (levels_amd64.go).
cpu_has = $(shell grep -qw $(1) /proc/cpuinfo && echo yes)
HAS_AVX512 := $(and $(call cpu_has,avx512f),$(call cpu_has,avx512bw),$(call cpu_has,avx512vl))
HAS_AVX512FP16 := $(and $(HAS_AVX512),$(call cpu_has,avx512_fp16))
EMU_LEVELS := $(if $(HAS_AVX512),avx512fp16,avx512,avx512fp16)
test-avx512emu:
	@if [ -n "$(HAS_AVX512FP16)" ]; then \
		echo "test-avx512emu: this processor has AVX512-FP16; test-cpu tested every level natively"; \
	else \
		mkdir -p build && CGO_ENABLED=0 $(GO) test -c -o build/cpu-avx512emu.test ./internal/cpu && \
		CGO_ENABLED=0 $(GO) test -c -o build/tests-avx512emu.test ./tests && \
		AVX512EMU_TIMEOUT=1200 bash scripts/avx512emu/run.sh build/cpu-avx512emu.test \
			-test.v -test.short -test.timeout=0 -test.skip='TestNoAllocsPerCall|TestForRows' \
			-cpu.want=$(EMU_LEVELS) -cpu.simd=$(EMU_LEVELS) && \
		AVX512EMU_TIMEOUT=1800 AVX512EMU_FILES=tests/testdata AVX512EMU_CWD=/tests \
			bash scripts/avx512emu/run.sh build/tests-avx512emu.test \
			-test.v -test.timeout=0 -test.run '^TestCPU$$' -tests.cpu-level=$(EMU_LEVELS); \
	fi

# With cgo and the provisioned Dawn: Dawn must load here (FUSEDNORM_REQUIRE_DAWN=1). The
# packages whose tests reach Dawn or the cgo build; the others (internal/cpu, plan, ...) do
# not depend on cgo and ran in test-cpu.
DAWN_PKGS := . ./cmd/... ./internal/dawn ./internal/dawnrt ./shaders ./tests
test-dawn: provision
	$(WITH_ENV) FUSEDNORM_REQUIRE_DAWN=1 $(GO) test -timeout 25m $(DAWN_PKGS)

test-native: provision
	$(WITH_ENV) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && \
		cmake --build build >/dev/null && ctest --test-dir build --output-on-failure

# The tiny-call benchmark of issue 17: the C twin as a program (cgo/bench/tiny_bench.c),
# then the Go calls beside the same C twin in one process (fusednorm-bench -tiny, C and Go
# alternating for TINY_ROUNDS rounds), then BenchmarkTiny* with allocations: same calls,
# same kernels.
TINY_N ?= 2000
TINY_ROUNDS ?= 5
bench-tiny: provision
	$(WITH_ENV) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build --target tiny_bench >/dev/null
	$(GO) run ./cmd/fusednorm-bench -tiny-wgsl build/tiny
	$(WITH_ENV) build/tiny_bench "$$FUSEDNORM_DAWN_LIB" build/tiny $(TINY_N)
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench -backend dawn -tiny $(TINY_N) -tiny-rounds $(TINY_ROUNDS)
	$(WITH_ENV) FUSEDNORM_BACKEND=dawn $(GO) test -run XXX -bench Tiny -benchmem -benchtime $(TINY_N)x .

# CI runs it on lavapipe to see that it runs; the numbers are not asserted.
test-tiny:
	$(MAKE) bench-tiny TINY_N=50 TINY_ROUNDS=2

check-generated:
	bash scripts/check-generated.sh

# 60 s per fuzz target, one after another (the Done-when of the Core issue); not part of
# make test. The targets' seeds are in testdata/fuzz/<Target>/.
FUZZ_TARGETS := FuzzEmbedLayerNorm FuzzAddLayerNorm FuzzKernel FuzzKernelAttrs
FUZZTIME ?= 60s
fuzz:
	for t in $(FUZZ_TARGETS); do \
		$(GO) test -run XXX -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) . || exit 1; done

# The short bounded fuzzing CI runs: 50000 inputs per target (7-11 s each on a 2-core
# machine). A count, not a duration: with -fuzztime as a duration Go's fuzzing coordinator
# can fail a target with "context deadline exceeded" and no failing input when the deadline
# races its workers (a CI run on record ended so, in FuzzAddLayerNorm, as earlier 10 s runs
# of FuzzKernelAttrs did). A count sets no deadline; a loaded machine only takes longer.
fuzz-ci:
	$(MAKE) fuzz FUZZTIME=50000x

clean:
	rm -rf build
