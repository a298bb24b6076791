# kvfabric — see README.md. `make demo` and `make test` work on a fresh machine.
GO          ?= go
BUILD       := build
DEVICE_DIR  := .device
RACE_PKGS   ?= ./internal/...
FUZZTIME    ?= 5s

.PHONY: all build demo test test-nocgo vet race fuzz device proto ptx clean

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
	$(MAKE) fuzz

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . ; echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet ./...

test-nocgo:
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./...

fuzz:
	@for t in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$t/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$t $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) ./$$t || exit 1; \
	  done; done

# Everything the GPU machine needs, in one git-ignored folder (see docs/device.md).
device:
	rm -rf $(DEVICE_DIR) && mkdir -p $(DEVICE_DIR)/cuda/testdata
	$(GO) build -ldflags='-s -w' -o $(DEVICE_DIR)/kvfabric ./cmd/kvfabric
	@: > $(DEVICE_DIR)/tests.txt; \
	for p in $$($(GO) list ./... ); do \
	  if $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}yes{{end}}' $$p | grep -q yes; then \
	    rel=$$(echo $$p | sed 's|^github.com/kvfabric/kvfabric/*||'); rel=$${rel:-.}; \
	    n=$$(echo $$rel | sed 's|/|_|g'); \
	    echo "test -c $$p"; \
	    $(GO) test -c -ldflags='-s -w' -o $(DEVICE_DIR)/$$n.test $$p || exit 1; \
	    echo "$$n.test $$rel" >> $(DEVICE_DIR)/tests.txt; fi; done
	cp internal/cuda/shim.h $(DEVICE_DIR)/cuda/
	cp internal/cuda/testdata/layoutcheck.c $(DEVICE_DIR)/cuda/testdata/
	cp scripts/device-batch.sh $(DEVICE_DIR)/

# Regenerate kernels/*.ptx (checked in, embedded by package kernels) with
# nvcc 13.0 from PyPI, or NVCC=/path/to/nvcc. See kernels/README.md.
ptx:
	./kernels/gen-ptx.sh

clean:
	rm -rf $(BUILD) $(DEVICE_DIR)

# Python package (issue 6) on CPU with the simulator: builds libkvfabric.so
# and runs pytest. Needs python3 with pytest and numpy (pip install pytest numpy).
PYTHON ?= python3
.PHONY: python-test
python-test:
	mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(BUILD)/libkvfabric.so ./capi
	cd python && KVFABRIC_LIB=$(CURDIR)/$(BUILD)/libkvfabric.so $(PYTHON) -m pytest -q tests
