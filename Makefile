# Reverser: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
# REGISTRY is where `make images` says the images go: _output/deploy names them there.
REGISTRY ?= reverser.local
LDFLAGS := -s -w -X reverser.dev/reverser/pkg/version.Version=$(VERSION) -X reverser.dev/reverser/pkg/version.Commit=$(COMMIT)

LOCAL_DIR ?= _output/local

BINARIES := bin/reverser-apiserver bin/reverser-controller bin/kubectl-reverser
TOOLS := bin/reverser-gitserver bin/reverser-redis bin/reverser-controlplane

.PHONY: all build tools images test unit integration e2e faults bench control-plane up start-built down demo verify fmt vet lint codegen verify-codegen verify-architecture verify-deps verify-docs funclen clean

all: build

## build: the servers and the kubectl plugin; tools: the local Git server and
## control plane runner. Each is one go build (hack/build.sh).
build:
	@REVERSER_LDFLAGS='$(LDFLAGS)' hack/build.sh $(notdir $(BINARIES))

tools:
	@hack/build.sh $(notdir $(TOOLS))

## images: multi-arch OCI image tarballs of both servers (_output/images) and
## the plugin's release archives (_output/release), without Docker.
images:
	$(GO) run ./hack/images --version '$(VERSION)' --commit '$(COMMIT)' --registry '$(REGISTRY)'

## control-plane: etcd, kube-apiserver, kube-controller-manager, cached by version.
control-plane:
	@hack/build-control-plane.sh >/dev/null

## test: unit, integration and end-to-end tests, then the short fault suite
## (its own control plane, so it does not share the machine with the e2e one).
test: control-plane
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v /test/faults)
	$(GO) test -count=1 -timeout 20m ./test/faults/

## faults: every fault with long bursts and outages; prints the table.
faults: control-plane
	REVERSER_FAULTS=full $(GO) test -count=1 -timeout 90m -v -run 'TestFaults|TestHA' ./test/faults/

## bench: P1 snapshot and P2 edit latency against floors measured in the same run.
bench: control-plane
	$(GO) test -tags bench -count=1 -timeout 45m -v -run TestBench ./test/bench/

e2e: control-plane
	$(GO) test -count=1 -timeout 30m -v ./test/e2e/...

## up/down: the local control plane, state in $(LOCAL_DIR); ARGOCD=1 make up also runs Argo CD.
up: build tools
	@$(MAKE) --no-print-directory start-built

# start-built: make up without building bin/ first (make demo has just built it).
start-built:
	@bin/reverser-controlplane up --dir $(LOCAL_DIR) --bin bin --control-plane-bin "$$(hack/build-control-plane.sh)" \
		--flux-bin "$$(hack/build-flux.sh)" $(if $(ARGOCD),--argocd-bin "$$(hack/build-argocd.sh)")

down:
	@if [ -x bin/reverser-controlplane ]; then bin/reverser-controlplane down --dir $(LOCAL_DIR); \
	else $(GO) run ./hack/controlplane down --dir $(LOCAL_DIR); fi

demo:
	@hack/demo.sh

unit:
	$(GO) test -count=1 ./pkg/... ./cmd/...

integration:
	$(GO) test -count=1 ./test/integration/...

## verify: formatting, vet, fresh generated code, lint, every package named in docs/architecture.md, no function over 80 lines, every API field and condition reason in docs/.
verify: fmt vet verify-codegen verify-architecture verify-deps funclen lint verify-docs

verify-docs:
	$(GO) test -count=1 -run 'TestDocsName|TestDocumented|TestProductReasons' ./pkg/apis/reverser/v1alpha1/

fmt:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags bench ./test/bench/

# Generated code is checked by its generator's tests, not by our linter.
lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags bench $$($(GO) list ./... | grep -v /pkg/generated/)

codegen:
	hack/update-codegen.sh

verify-codegen:
	hack/verify-codegen.sh

verify-architecture:
	hack/verify-architecture.sh

verify-deps:
	hack/verify-deps.sh

# No function under pkg/ or cmd/ over 80 lines (generated code aside).
funclen:
	$(GO) run ./hack/funclen -max 80 pkg cmd

clean:
	rm -rf bin _output
