# Targets named in README.md and docs/testing.md. CI runs `make lint` and these targets through .ci/run.
GO ?= go

# The Go modules the targets below run in, each in its own directory (docs/architecture.md, "Two
# products, their modules"): the runtime (the root), the order system, the CLI and deploy/'s checks
# against a running system. bench/ and deploy/image, deploy/kubernetes/validate and deploy/otelcol are
# modules of their own with targets of their own.
MODULES = . ordersystem cmd deploy

# $(call in_modules,COMMAND): runs COMMAND in each of MODULES, all of them even when one fails, and
# fails if any did.
in_modules = rc=0; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(1)) || rc=1; done; exit $$rc

# $(call in_modules_parallel,COMMAND): the same, the modules at the same time (for suites that mostly
# wait); each module's output is printed as a block once it ends.
in_modules_parallel = d=$$(mktemp -d); for m in $(MODULES); do (cd $$m && $(1)) > "$$d/$$(echo $$m | tr / _).log" 2>&1 & \
  echo $$! > "$$d/$$(echo $$m | tr / _).pid"; done; rc=0; for m in $(MODULES); do f=$$d/$$(echo $$m | tr / _); \
  wait $$(cat $$f.pid) || rc=1; echo "== $$m"; cat $$f.log; done; rm -rf "$$d"; exit $$rc

.PHONY: build image test-deploy test-otelcol test test-race test-short test-kafka test-kafka-3 test-kafka-secure chaos-kafka-3 bench bench-compare fuzz lint ci mod-download

# Every module's dependencies into the module cache (.ci/run runs it first).
mod-download:
	@$(call in_modules,$(GO) mod download)

build:
	cd cmd && $(GO) build -o ../bin/ordercast ./ordercast

# The container image, built without a container engine (deploy/image, a module of its own:
# go-containerregistry): a static binary (CGO_ENABLED=0; SQLite is pure Go) in one layer on no base,
# run as 65532, written as a tarball (docker load, kind load image-archive, crane push) and validated.
# Labels and mtimes come from the commit, so one commit gives one digest. docs/deployment.md.
IMAGE_TAR ?= bin/ordercast-image.tar
IMAGE_OCI_TAR ?= bin/ordercast-image.oci.tar
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_CREATED ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_TAG ?= ordercast:$(IMAGE_VERSION)
IMAGE_SOURCE ?= https://github.com/ordercast/ordercast
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	cd cmd && CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -buildvcs=auto -ldflags='-s -w' -o ../bin/ordercast-static ./ordercast
	cd deploy/image && $(GO) run . --binary ../../bin/ordercast-static --arch $(IMAGE_ARCH) --out ../../$(IMAGE_TAR) --oci-out ../../$(IMAGE_OCI_TAR) \
	  --tag '$(IMAGE_TAG)' --version '$(IMAGE_VERSION)' --revision '$(IMAGE_REVISION)' --source '$(IMAGE_SOURCE)' --created '$(IMAGE_CREATED)'

# The deployment's offline checks, modules of their own (not part of `make test`): the image test
# (builds the image, runs the one-day replay in its unpacked filesystem as its config says: chroot and
# uid 65532 when run as root) and deploy/kubernetes/validate (every kustomize overlay rendered and
# decoded strictly, flags, variables, ports and metric names checked against the built binary, the
# compose file loaded by compose-spec's loader). About 2 minutes on 2 cores, builds included.
test-deploy:
	cd deploy/image && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...
	cd deploy/kubernetes/validate && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# Tracing through a real OpenTelemetry Collector (deploy/otelcol, a module of its own: the Collector's
# OTLP receiver and the contrib file exporter, v0.161.0): `ordercast up` with OTEL_EXPORTER_OTLP_ENDPOINT
# sends one order's spans to it on a loopback port from 19600, and the test reads its file back
# (docs/observability.md). Skipped, saying so, when the Collector's modules cannot be downloaded,
# except in CI. About 8 minutes on 2 shared cores with a cold build cache, seconds after.
test-otelcol: build
	@cd deploy/otelcol && if ! $(GO) mod download >/dev/null 2>&1; then \
	  echo "test-otelcol: SKIPPED: deploy/otelcol's modules (the OpenTelemetry Collector) cannot be downloaded"; \
	  test "$$CI" != true || exit 1; exit 0; fi; \
	$(GO) vet ./... && ORDERCAST_BIN=$(CURDIR)/bin/ordercast $(GO) test -count=1 -timeout 20m ./...

# The default suite: unit, integration (embedded broker) and end-to-end tests, with the race detector.
# The tests that mostly wait (timeouts, held requests) call testkafka.Parallel and overlap, 4 at a
# time per package, and 2 packages at a time in each module, the modules at the same time (most of their
# time is waiting).
# The modules (MODULES) run at the same time, each one's output printed when it ends, as go test prints a
# package's; a failure in one does not stop the others.
TEST_PARALLEL ?= 4
TEST_P ?= 2
test:
	@$(call in_modules_parallel,ORDERCAST_TEST_BROKERS= $(GO) test -race -count=1 -p $(TEST_P) -parallel $(TEST_PARALLEL) -timeout 25m ./...)

# The same suite against a running real Kafka (internal/testkit/testkafka): starts nothing. The tests share
# the cluster and empty it of topics and groups, so one package at a time (-p 1); no -race, to keep
# time down. Start the broker with scripts/kafka.sh (see docs/testing.md).
ORDERCAST_TEST_BROKERS ?= 127.0.0.1:19092
test-kafka:
	@$(call in_modules,ORDERCAST_TEST_BROKERS=$(ORDERCAST_TEST_BROKERS) $(GO) test -p 1 -count=1 -timeout 25m ./...)

# Three nodes: starts a fresh 3-node cluster of its own (state $(KAFKA3_STATE), ports
# $(KAFKA3_PORT)..+5), runs the broker-kill test on it (KAFKA3_RUN=. for the whole suite of
# cmd/ordercast), then stops and deletes the cluster.
KAFKA3_STATE ?= /tmp/ordercast-kafka-3
KAFKA3_PORT ?= 19192
KAFKA3_RUN ?= TestBrokerKilledUnderLoad
test-kafka-3:
	@export ORDERCAST_KAFKA_STATE=$(KAFKA3_STATE) ORDERCAST_KAFKA_PORT=$(KAFKA3_PORT) \
	  ORDERCAST_KAFKA_EXTRA_PROPS=group.min.session.timeout.ms=100; \
	scripts/kafka.sh start --clean --brokers 3 || exit 1; \
	ORDERCAST_TEST_BROKERS=$$(scripts/kafka.sh brokers) ORDERCAST_TEST_KAFKA_SCRIPT=$(CURDIR)/scripts/kafka.sh \
	  $(GO) -C cmd test -p 1 -count=1 -timeout 15m -v -run '$(KAFKA3_RUN)' ./ordercast/; rc=$$?; \
	scripts/kafka.sh stop --clean; exit $$rc

# Secured: starts a fresh 1-node Kafka with SASL_SSL, SCRAM-SHA-512 and the StandardAuthorizer
# (scripts/kafka.sh start --secure; state $(KAFKASEC_STATE), ports $(KAFKASEC_PORT)..+1), runs
# TestSecureCluster on it (each service as its own principal with the ACLs of `ordercast acls`;
# a wrong password, an untrusted certificate and a missing ACL refused at start) and the tests of
# testkafka.Secure (KAFKASEC_RUN: the start checks, `acls --apply`, rights lost while running, in
# processor, outbox, system and cmd/ordercast; one package at a time), then stops and deletes it.
KAFKASEC_STATE ?= /tmp/ordercast-kafka-secure
KAFKASEC_PORT ?= 19292
KAFKASEC_RUN ?= TestSecureCluster|TestACLsApply|^TestRightLostWhileRunning|TestRelayRightLostWhileRunning|TestCheckRights|TestCheckTxnWrite|TestStartChecksRelayTxnWrite|TestServiceLosesRightWhileRunning
# Run in a test process of its own: right after TestRightLostWhileRunning in the same process, the
# broker went on reporting the deleted g.dlq's old topic id to the next test's reset for over 90 s
# (not yet explained; alone it passes).
KAFKASEC_RUN2 ?= TestTxnRightLostWhileRunning
test-kafka-secure:
	@export ORDERCAST_KAFKA_STATE=$(KAFKASEC_STATE) ORDERCAST_KAFKA_PORT=$(KAFKASEC_PORT) \
	  ORDERCAST_KAFKA_EXTRA_PROPS=group.min.session.timeout.ms=100; \
	scripts/kafka.sh start --clean --secure --brokers 1 || exit 1; \
	export ORDERCAST_TEST_SECURE_BROKERS=$$(scripts/kafka.sh brokers) ORDERCAST_TEST_SECURE_CA=$(KAFKASEC_STATE)/tls/ca.pem \
	  ORDERCAST_TEST_SECURE_ADMIN_PASSWORD=$$(cat $(KAFKASEC_STATE)/tls/admin.password); \
	$(GO) test -p 1 -count=1 -timeout 15m -v -run '$(KAFKASEC_RUN)' ./processor/ ./outbox/ && \
	  $(GO) -C ordersystem test -p 1 -count=1 -timeout 15m -v -run '$(KAFKASEC_RUN)' ./system/ && \
	  $(GO) -C cmd test -p 1 -count=1 -timeout 15m -v -run '$(KAFKASEC_RUN)' ./ordercast/ && \
	  $(GO) test -p 1 -count=1 -timeout 15m -v -run '$(KAFKASEC_RUN2)' ./processor/; rc=$$?; \
	scripts/kafka.sh stop --clean; exit $$rc

# The crash harness on a real cluster: starts a fresh 3-node Kafka whose nodes advertise the
# harness's fault proxies (state $(CHAOS3_STATE), ports $(CHAOS3_PORT)..+8) and a durable
# PostgreSQL (port $(CHAOS3_PG_PORT)), runs `ordercast chaos` for $(CHAOS3_DURATION) with every
# fault (CHAOS3_FLAGS="--seeds 20 --table soak.md --duration 10m" for the soak), then stops and
# deletes both. Small heaps: the cluster and a dozen services share the machine.
CHAOS3_STATE ?= /tmp/ordercast-chaos-kafka-3
CHAOS3_PORT ?= 19392
CHAOS3_PG_PORT ?= 15442
CHAOS3_PG_STATE ?= /tmp/ordercast-chaos-pg
CHAOS3_DURATION ?= 3m
CHAOS3_SEED ?= 1
CHAOS3_FLAGS ?=
CHAOS3_DATA ?= /tmp/ordercast-chaos-run
chaos-kafka-3: build
	@export ORDERCAST_KAFKA_STATE=$(CHAOS3_STATE) ORDERCAST_KAFKA_PORT=$(CHAOS3_PORT) ORDERCAST_KAFKA_PROXIED=1 \
	  ORDERCAST_KAFKA_HEAP="$${ORDERCAST_KAFKA_HEAP:--Xms96m -Xmx256m}" \
	  ORDERCAST_PG_PORT=$(CHAOS3_PG_PORT) ORDERCAST_PG_STATE=$(CHAOS3_PG_STATE) ORDERCAST_PG_DURABLE=1; \
	scripts/kafka.sh start --clean --brokers 3 >/dev/null || exit 1; \
	scripts/postgres.sh start >/dev/null || { scripts/kafka.sh stop --clean; exit 1; }; \
	rm -rf $(CHAOS3_DATA); \
	bin/ordercast chaos --duration $(CHAOS3_DURATION) --seed $(CHAOS3_SEED) --data-dir $(CHAOS3_DATA) \
	  --kafka-script scripts/kafka.sh --postgres-script scripts/postgres.sh --proxy \
	  --db "$$(scripts/postgres.sh dsn)" $(CHAOS3_FLAGS); rc=$$?; \
	scripts/postgres.sh stop; scripts/kafka.sh stop --clean; exit $$rc

test-short:
	@$(call in_modules,$(GO) test -short -count=1 ./...)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./processor/
	$(GO) -C ordersystem test -run '^$$' -bench . -benchtime 3x ./schema/ ./replay/

# The side-by-side benchmark (bench/, a module of its own; docs/benchmarks.md, "Side by side with other
# clients"): starts a throwaway 1-node Kafka (state $(BENCH_KAFKA_STATE), port $(BENCH_KAFKA_PORT)),
# runs every contender and workload, writes bench/$(BENCH_OUT) (tables.md, *.svg, results.json),
# then stops and deletes the broker. BENCH_FLAGS=--quick checks the pipeline in a few minutes.
BENCH_KAFKA_STATE ?= /tmp/ordercast-kafka-bench
BENCH_KAFKA_PORT ?= 19592
BENCH_OUT ?= results
BENCH_FLAGS ?=
bench-compare:
	@export ORDERCAST_KAFKA_STATE=$(BENCH_KAFKA_STATE) ORDERCAST_KAFKA_PORT=$(BENCH_KAFKA_PORT) \
	  ORDERCAST_KAFKA_EXTRA_PROPS=group.initial.rebalance.delay.ms=0; \
	scripts/kafka.sh start --clean --brokers 1 || exit 1; \
	cd bench && $(GO) run . all --brokers 127.0.0.1:$(BENCH_KAFKA_PORT) --out $(BENCH_OUT) $(BENCH_FLAGS); rc=$$?; \
	cd .. && scripts/kafka.sh stop --clean; exit $$rc

# Every fuzz target for FUZZTIME each (go test -fuzz; the seed corpora also run in `make test`):
# module:package:target, the package relative to its module's directory.
# FUZZTIME is a count of executions (Nx), not a duration: with a duration, Go's fuzz coordinator can fail a
# target with a bare "context deadline exceeded" at the deadline when the workers are starved of CPU
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 200000x
FUZZ_TARGETS = .:./processor:FuzzOffsetTracker .:./processor:FuzzDecodeOffsetMap .:./processor:FuzzGroupStartSuffix \
  ordersystem:./schema:FuzzDecode ordersystem:./service/checkout:FuzzParseRequest \
  ordersystem:./service/checkout/authn:FuzzVerify ordersystem:./internal/jsonlimit:FuzzCheck
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do mod=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; name=$${rest##*:}; \
	  echo "fuzz $$name ($$mod: $$pkg, $(FUZZTIME))"; \
	  $(GO) -C $$mod test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; done

lint:
	@$(call in_modules,$(GO) vet ./...)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

ci: lint test
