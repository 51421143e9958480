# fusednorm — every target sets up what it needs (Dawn, and lavapipe on GPU-less machines).
#   make bench   the main job: the benchmark table on the best backend here (CPU without GPU)
#   make test    everything CI runs: vet, the CPU-only build and tests, the race detector
#                on the CPU path, the Dawn suite
#                (lavapipe without a GPU), the C layer's native test, generated-code checks

SHELL := /bin/bash
GO ?= go
ENV := third_party/env.sh
# Load the provisioned paths (FUSEDNORM_DAWN_LIB, VK_ICD_FILENAMES) into a recipe.
WITH_ENV := set -a; source $(ENV); set +a;

.PHONY: all provision bench bench-ort test test-cpu test-race test-dawn test-native check-generated fuzz clean

all: test

# Idempotent: a second run checks hashes and downloads nothing.
provision:
	bash scripts/provision.sh

bench: provision
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench $(BENCHFLAGS)

# ONNX Runtime's CPU kernel on the same shapes in the same run, one thread each.
ORACLE := $(CURDIR)/build/oracle
bench-ort: provision
	rm -rf $(ORACLE) && mkdir -p build && cp -r ../shared/oracle $(ORACLE) && chmod -R u+w $(ORACLE)
	cd $(ORACLE) && npm ci --ignore-scripts --no-audit --no-fund >/dev/null
	$(WITH_ENV) $(GO) run ./cmd/fusednorm-bench -backend cpu -threads 1 -ort $(ORACLE) $(BENCHFLAGS)

test: check-generated test-cpu test-race test-dawn test-native
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

# With cgo and the provisioned Dawn: Dawn must load here (FUSEDNORM_REQUIRE_DAWN=1).
test-dawn: provision
	$(WITH_ENV) FUSEDNORM_REQUIRE_DAWN=1 $(GO) test -timeout 25m ./...

test-native: provision
	$(WITH_ENV) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && \
		cmake --build build >/dev/null && ctest --test-dir build --output-on-failure

check-generated:
	bash scripts/check-generated.sh

# 60 s per fuzz target (the Done-when of the Core issue); not part of make test.
fuzz:
	for t in FuzzEmbedLayerNorm FuzzAddLayerNorm FuzzKernel; do \
		$(GO) test -run XXX -fuzz "^$$t\$$" -fuzztime 60s . || exit 1; done

clean:
	rm -rf build
