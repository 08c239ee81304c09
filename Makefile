# Targets named in the README. CI runs `make ci` through .ci/run.
GO ?= go

.PHONY: build test test-race test-short bench lint ci

build:
	$(GO) build -o bin/ordercast ./cmd/ordercast

# The default suite: unit, integration (embedded broker) and end-to-end tests, with the race detector.
test:
	$(GO) test -race -count=1 -timeout 25m ./...

test-short:
	$(GO) test -short -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./processor/ ./schema/ ./replay/

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

ci: lint test
