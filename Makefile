# fusednorm — every target sets up what it needs (Dawn, and lavapipe on GPU-less machines).
#   make bench   the main job: the benchmark table on the best backend here (CPU without GPU)
#   make test    everything CI runs: vet, the CPU-only build and tests, the race detector
#                on the CPU path, the avx512 kernels (emulated where the processor has no
#                AVX-512), the Dawn suite (lavapipe without a GPU), the C layer's native
#                test, generated-code checks

SHELL := /bin/bash
GO ?= go
ENV := third_party/env.sh
# Load the provisioned paths (FUSEDNORM_DAWN_LIB, VK_ICD_FILENAMES) into a recipe.
WITH_ENV := set -a; source $(ENV); set +a;

.PHONY: all provision bench bench-ort bench-tiny test-tiny test test-cpu test-race test-avx512emu test-dawn test-native check-generated fuzz clean

all: test

# Idempotent: a second run checks hashes and downloads nothing.
provision:
	bash scripts/provision.sh

bench: provision
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench $(BENCHFLAGS)

# ONNX Runtime's CPU kernel on the same shapes in the same run, one thread each.
ORACLE := $(CURDIR)/build/oracle
bench-ort: provision $(ORACLE)/node_modules
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench -backend cpu -threads 1 -ort $(ORACLE) $(BENCHFLAGS)

# A copy of the shared oracle with its packages installed, made again when its lock file changes.
$(ORACLE)/node_modules: ../shared/oracle/package-lock.json
	rm -rf $(ORACLE) && mkdir -p build && cp -r ../shared/oracle $(ORACLE) && chmod -R u+w $(ORACLE)
	cd $(ORACLE) && npm ci --ignore-scripts --no-audit --no-fund >/dev/null

test: check-generated test-cpu test-race test-avx512emu test-dawn test-native test-tiny
	@echo "make test: all passed"

# The pure-Go build: no cgo, no Dawn; the CPU backend must carry every test on its own.
test-cpu:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test ./...
	CGO_ENABLED=0 $(GO) test -tags purego ./cpu/ ./tests/

# The race detector over the CPU backend's worker pool and the API's pooled call state.
test-race:
	$(GO) test -race -short ./cpu/ .

# The avx512 and avx512fp16 kernels against the pure-Go level on a processor without
# AVX512-FP16, under Bochs emulating a Sapphire Rapids (scripts/avx512emu; Bochs 3.0 built
# from Debian's source on first use, about 2-3 minutes, then cached): the cpu tests at both
# levels, every output compared bit for bit, then the conformance suite's TestCPU at both
# levels against the pure-Go plan under both profiles, with tests/testdata copied into the
# guest. On a processor with AVX512-FP16, test-cpu has already run both levels natively.
# The allocation and worker-pool tests, which do not depend on the level, run natively
# only: under the emulator they took two thirds of the time.
EMU_LEVELS := avx512,avx512fp16
test-avx512emu:
	@if grep -qw avx512_fp16 /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then \
		echo "test-avx512emu: this processor has AVX512-FP16; test-cpu tested $(EMU_LEVELS) natively"; \
	else \
		mkdir -p build && CGO_ENABLED=0 $(GO) test -c -o build/cpu-avx512emu.test ./cpu && \
		CGO_ENABLED=0 $(GO) test -c -o build/tests-avx512emu.test ./tests && \
		AVX512EMU_TIMEOUT=1200 bash scripts/avx512emu/run.sh build/cpu-avx512emu.test \
			-test.v -test.timeout=0 -test.skip='TestNoAllocsPerCall|TestForRows' \
			-cpu.want=$(EMU_LEVELS) -cpu.simd=$(EMU_LEVELS) && \
		AVX512EMU_TIMEOUT=1800 AVX512EMU_FILES=tests/testdata AVX512EMU_CWD=/tests \
			bash scripts/avx512emu/run.sh build/tests-avx512emu.test \
			-test.v -test.timeout=0 -test.run '^TestCPU$$' -tests.cpu-level=$(EMU_LEVELS); \
	fi

# With cgo and the provisioned Dawn: Dawn must load here (FUSEDNORM_REQUIRE_DAWN=1).
test-dawn: provision
	$(WITH_ENV) FUSEDNORM_REQUIRE_DAWN=1 $(GO) test -timeout 25m ./...

test-native: provision
	$(WITH_ENV) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && \
		cmake --build build >/dev/null && ctest --test-dir build --output-on-failure

# The tiny-call benchmark of issue 17: the C twin (cgo/bench/tiny_bench.c) and the Go side
# (fusednorm-bench -tiny, then BenchmarkTiny* with allocations), same calls, same kernels.
TINY_N ?= 2000
bench-tiny: provision
	$(WITH_ENV) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build --target tiny_bench >/dev/null
	$(GO) run ./internal/cmd/tinywgsl build/tiny
	$(WITH_ENV) build/tiny_bench "$$FUSEDNORM_DAWN_LIB" build/tiny $(TINY_N)
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench -backend dawn -tiny $(TINY_N)
	$(WITH_ENV) FUSEDNORM_BACKEND=dawn $(GO) test -run XXX -bench Tiny -benchmem -benchtime $(TINY_N)x .

# CI runs it on lavapipe to see that it runs; the numbers are not asserted.
test-tiny:
	$(MAKE) bench-tiny TINY_N=50

check-generated:
	bash scripts/check-generated.sh

# 60 s per fuzz target (the Done-when of the Core issue); not part of make test.
fuzz:
	for t in FuzzEmbedLayerNorm FuzzAddLayerNorm FuzzKernel; do \
		$(GO) test -run XXX -fuzz "^$$t\$$" -fuzztime 60s . || exit 1; done

clean:
	rm -rf build
