# kvfabric — see README.md. `make demo` and `make test` work on a fresh machine.
GO          ?= go
BUILD       := build
DEVICE_DIR  := .device
RACE_PKGS   ?= ./internal/...
# An execution count, not a duration: duration-based -fuzztime races the fuzz
# coordinator's deadline on a loaded machine (golang/go#75804, fixed in Go
# 1.27) and fails with a bare "context deadline exceeded".
FUZZTIME    ?= 2000x

.PHONY: all build demo test test-nocgo browser-test vet race fuzz device proto ptx clean

all: build

build:
	$(GO) build -o $(BUILD)/kvfabric ./cmd/kvfabric

demo: build
	./$(BUILD)/kvfabric demo

# The README's test command: vet, unit + multi-process simulator tests, the
# race detector on concurrent packages, the CUDA-off build, bounded fuzzing.
test: vet
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race $(RACE_PKGS)
	$(MAKE) test-nocgo
	$(MAKE) browser-test
	$(MAKE) python-test
	$(MAKE) fuzz

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . ; echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet ./...

# The dashboard in headless Chromium (internal/master/dash): a master with a
# simulated provider and consumers under load. Without Chromium (apt-get
# install chromium, or KVFABRIC_CHROMIUM=/path) the test is skipped and
# this says so in capitals.
browser-test:
	@KVFABRIC_BROWSER_TEST=1 $(GO) test -count=1 -v -run '^TestDashboardInBrowser$$' ./internal/master/dash/ > .browser.log 2>&1; rc=$$?; cat .browser.log; \
	if grep -q -- '--- SKIP' .browser.log; then echo "browser-test: SKIPPED — no Chromium, the dashboard was not tested in a browser"; \
	elif [ $$rc = 0 ]; then echo "browser-test: passed in headless Chromium"; fi; rm -f .browser.log; exit $$rc

test-nocgo:
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./...

# Every Fuzz* target for FUZZTIME. A run that still ends with the engine's
# own "context deadline exceeded" (the time limit hit a worker mid-run; no
# failing input written) is retried once; a real crash fails at once.
fuzz:
	@for t in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$t/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    for try in 1 2; do \
	      echo "fuzz $$t $$f"; \
	      if $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=0 ./$$t > .fuzz.log 2>&1; then cat .fuzz.log; break; fi; \
	      cat .fuzz.log; \
	      if [ $$try = 1 ] && grep -q 'context deadline exceeded' .fuzz.log && ! grep -q 'Failing input written' .fuzz.log; then \
	        echo "fuzz $$t $$f: engine deadline flake, retrying once"; continue; fi; \
	      rm -f .fuzz.log; exit 1; \
	    done; \
	  done; done; rm -f .fuzz.log

# Everything the GPU machine needs, in one git-ignored folder (see
# docs/device.md): the binary, the C ABI library for the Python package, and
# the test binaries of DEVICE_TESTS (their real-driver tests are gated by
# KVFABRIC_GPU_TESTS=1). Kept small: a device call carries at most 64 MiB.
DEVICE_TESTS ?= internal/cuda internal/transfer internal/mapping
device:
	rm -rf $(DEVICE_DIR) && mkdir -p $(DEVICE_DIR)/cuda/testdata
	$(GO) build -tags kvfabric_noembed -ldflags='-s -w' -o $(DEVICE_DIR)/kvfabric ./cmd/kvfabric
	CGO_ENABLED=1 $(GO) build -ldflags='-s -w' -buildmode=c-shared -o $(DEVICE_DIR)/libkvfabric.so ./capi
	@: > $(DEVICE_DIR)/tests.txt; \
	for rel in $(DEVICE_TESTS); do \
	    n=$$(echo $$rel | sed 's|/|_|g'); \
	    echo "test -c ./$$rel"; \
	    $(GO) test -c -ldflags='-s -w' -o $(DEVICE_DIR)/$$n.test ./$$rel || exit 1; \
	    echo "$$n.test $$rel" >> $(DEVICE_DIR)/tests.txt; done
	cp internal/cuda/shim.h $(DEVICE_DIR)/cuda/
	cp internal/cuda/testdata/layoutcheck.c $(DEVICE_DIR)/cuda/testdata/
	@du -sh $(DEVICE_DIR)

# Regenerate kernels/*.ptx (checked in, embedded by package kernels) with
# nvcc 13.0 from PyPI, or NVCC=/path/to/nvcc. See kernels/README.md.
ptx:
	./kernels/gen-ptx.sh

# Regenerates the committed API code (CI does not need protoc). Needs protoc
# (apt-get install protobuf-compiler) and, in GOPATH/bin:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
proto:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I api \
	  --go_out=api --go_opt=paths=source_relative \
	  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
	  api/kvfabric/v1/kvfabric.proto

clean:
	rm -rf $(BUILD) $(DEVICE_DIR) dist

# Python package (issue 6) on CPU with the simulator: builds libkvfabric.so
# (and the kvfabric binary, a master for the remote-master tests) and runs
# pytest. Needs python3 with pytest and numpy (pip install pytest numpy).
PYTHON ?= python3
.PHONY: python-test
python-test:
	@$(PYTHON) -c 'import numpy, pytest' 2>/dev/null || $(PYTHON) -m pip install -q pytest numpy
	mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(BUILD)/libkvfabric.so ./capi
	$(GO) build -o $(BUILD)/kvfabric ./cmd/kvfabric
	cd python && KVFABRIC_LIB=$(CURDIR)/$(BUILD)/libkvfabric.so KVFABRIC_BIN=$(CURDIR)/$(BUILD)/kvfabric $(PYTHON) -m pytest -q tests

# Mooncake's own store tests (mooncake-wheel/tests at a pinned commit),
# unmodified, against the Mooncake facade on the simulator; not part of
# `make test`. Logs in build/mooncake-tests/. See scripts/mooncake-upstream-tests.sh.
.PHONY: mooncake-upstream-test
mooncake-upstream-test:
	mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(BUILD)/libkvfabric.so ./capi
	$(GO) build -o $(BUILD)/kvfabric ./cmd/kvfabric
	PYTHON=$(PYTHON) ./scripts/mooncake-upstream-tests.sh

# Wheels that install without Go (issue #17): dist/kvfabric-$(VERSION)-py3-none-
# manylinux_2_28_{x86_64,aarch64}.whl (the package, libkvfabric.so and the
# kvfabric binary behind a `kvfabric` console command; built with zig cc
# from PyPI against glibc 2.28, aarch64 cross-built, checked by auditwheel)
# and the mooncake shim's wheel. Tools go to build/wheel-tools (a venv,
# PyPI once). See scripts/wheel.sh.
VERSION      := $(shell cat VERSION)
WHEEL_ARCHES ?= x86_64 aarch64
.PHONY: wheel wheel-test device-wheel
wheel:
	PYTHON=$(PYTHON) GO=$(GO) WHEEL_ARCHES="$(WHEEL_ARCHES)" ./scripts/wheel.sh

# Installs this machine's wheel into a fresh venv without Go on PATH and runs
# python/tests against the installed package (scripts/wheel-test.sh). Not in
# `make test` (it builds the wheel: minutes of zig-linked cgo builds on top
# of ~6 min); .ci/run runs it after make test.
wheel-test:
	$(MAKE) wheel WHEEL_ARCHES=$$(uname -m)
	PYTHON=$(PYTHON) ./scripts/wheel-test.sh

# The x86-64 wheels for the GPU machine, in $(DEVICE_DIR)/wheels (after
# `make device`, which empties $(DEVICE_DIR)); scripts/device-wheel.sh there.
device-wheel:
	$(MAKE) wheel WHEEL_ARCHES=x86_64
	mkdir -p $(DEVICE_DIR)/wheels
	rm -f $(DEVICE_DIR)/wheels/*.whl
	cp dist/kvfabric-$(VERSION)-py3-none-manylinux_2_28_x86_64.whl dist/kvfabric_mooncake_shim-$(VERSION)-py3-none-any.whl $(DEVICE_DIR)/wheels/
	@du -sh $(DEVICE_DIR) $(DEVICE_DIR)/wheels
