# Reverser: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w

BINARIES := bin/reverser-apiserver

.PHONY: all build test unit integration verify fmt vet lint codegen verify-codegen clean

all: build

build: $(BINARIES)

bin/reverser-apiserver: FORCE
	$(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/apiserver

FORCE:

## test: unit and integration tests.
test:
	$(GO) test -count=1 ./...

unit:
	$(GO) test -count=1 ./pkg/... ./cmd/...

integration:
	$(GO) test -count=1 ./test/integration/...

## verify: formatting, vet, fresh generated code, lint.
verify: fmt vet verify-codegen lint

fmt:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Generated code is checked by its generator's tests, not by our linter.
lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $$($(GO) list ./... | grep -v /pkg/generated/)

codegen:
	hack/update-codegen.sh

verify-codegen:
	hack/verify-codegen.sh

clean:
	rm -rf bin _output
