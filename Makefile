# fanout — developer entry points. `make demo` and `make test` are the two commands a
# newcomer needs; CI (.ci/run) calls `make test`.

GO      ?= go
TOOL    := $(GO) tool -modfile=tools/go.mod
BUF     := $(TOOL) buf
GOFILES := $(shell git ls-files '*.go' 2>/dev/null | grep -v '^gen/')
FUZZTIME ?= 30s

.PHONY: all build demo test test-stress deps unit manifests generate check-generated docs docs-check lint fmt-check vet bench bench-compare bench-transports bench-isolation bench-memory bench-state-memory bench-store fuzz clean

all: build

## build: compile the sidecar into bin/sidecar
# -buildvcs=auto: record the git commit for `sidecar version` and fanout_build_info
# in a git checkout, even where GOFLAGS turns it off (and build without it elsewhere).
build:
	$(GO) build -buildvcs=auto -o bin/sidecar ./cmd/sidecar

## demo: a local 3-node cluster under live load (Ctrl-C to stop)
demo: build
	bin/sidecar demo

## test: everything CI checks — format, vet, proto lint, generated code is current,
## every test (unit, handler, fuzz seeds, end-to-end) with the race detector, and the
## packaging (Dockerfile, Kubernetes manifests)
test: fmt-check docs-check vet lint check-generated deps unit manifests

## test-stress: the end-to-end tests (test/e2e) as on a busy 2-core CI machine, under
## HOGS (default 2) CPU hogs: test/stress.sh starts that many busy loops, runs the
## tests, and kills the loops however the tests end (pass, failure, Ctrl-C, SIGTERM;
## a loop whose script was SIGKILLed ends within a second). FANOUT_E2E_STRESS=1 makes
## the rounds-based tests run their long form (TestJetStreamOneKeyRace: 200 rounds, not
## 20). Deps as for make test.
HOGS ?= 2
test-stress: deps
	HOGS=$(HOGS) FANOUT_E2E_STRESS=1 bash test/stress.sh $(GO) -C test test -race -count=1 -timeout=30m ./e2e/

## deps: install the test tools Go does not bring (promtool, Python's grpc, Node.js and
## examples/node's packages by npm ci), if missing or stale
deps:
	bash test/deps.sh

## unit: every test of the product (.), its end-to-end tests (test/, a module of its
## own so that the product's go.mod holds only what the product uses) and the NATS
## bench of bench-compare (bench/natsbench, a module of its own for the NATS client), and
## the parsing of bench-transports and bench-compare (bench/transports_test.py,
## bench/compare_test.py)
## (-timeout=30m for the end-to-end tests: they took 5.5 min under two CPU hogs and
## 9 min under three, near go test's default 10m)
unit:
	$(GO) test -race -count=1 ./...
	$(GO) -C test test -race -count=1 -timeout=30m ./...
	$(GO) -C bench/natsbench test -race -count=1 ./...
	python3 bench/transports_test.py
	python3 bench/compare_test.py

## manifests: the Dockerfile and deploy/kubernetes, checked without Docker or a cluster
## (deploy/kubernetes/check, a module of its own so that the Kubernetes API types stay
## out of the product's go.mod): every manifest decoded strictly into its API type,
## each kustomization rendered, the rules the manifests' comments state, and the
## sidecar built with the Dockerfile's own go build line: static, knows every FANOUT_*
## variable the manifests set, answers the probes' gRPC health checks
manifests:
	$(GO) -C deploy/kubernetes/check test -count=1 ./...

## docs: rewrite docs/CLI.md, the command and flag reference, from the commands
## themselves (cmd/sidecar's TestCLIReferenceIsCurrent fails when it is stale)
docs:
	$(GO) run ./cmd/sidecar docs > docs/CLI.md

## generate: rewrite gen/ from proto/ (offline: buf and plugins are Go tools)
generate:
	$(BUF) generate

## check-generated: fail if gen/ differs from what proto/ generates
check-generated: generate
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
		echo "gen/ is stale: run 'make generate' and commit the result"; \
		git status --porcelain -- gen; git diff --stat -- gen; exit 1; fi

## lint: buf lint (STANDARD) on the API
lint:
	$(BUF) lint

## docs-check: README and docs/BENCHMARKS.md stay references a newcomer reads, not
## journals: at most 300 and 600 lines (history lives in git); no file cites a SPEC
## section (a file outside the repository)
docs-check:
	@n=$$(wc -l <README.md); if [ $$n -gt 300 ]; then echo "README.md is $$n lines, at most 300: move detail to docs/"; exit 1; fi
	@n=$$(wc -l <docs/BENCHMARKS.md); if [ $$n -gt 600 ]; then echo "docs/BENCHMARKS.md is $$n lines, at most 600: keep the current figure per measure"; exit 1; fi
	@f=$$(git grep -l 'SPEC §' -- . ':!cmd/sidecar/root_test.go' ':!Makefile'); if [ -n "$$f" ]; then echo "these files cite a SPEC section, a file outside the repository: say the rule itself"; echo "$$f"; exit 1; fi

fmt-check:
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) -C test vet ./...
	$(GO) -C deploy/kubernetes/check vet ./...
	$(GO) -C bench/natsbench vet ./...

## bench: micro-benchmarks (not run by CI; see docs/BENCHMARKS.md)
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./pkg/...

## bench-compare: fanout vs its anchors, a NATS cluster (and a single server) and NATS
## JetStream KV (R3 file, R1 memory), all on the nats-server pinned in tools/go.mod, with
## one pacer and one stamping rule for all; memory at 500,000 live keys, settled; 3
## interleaved runs (~8 min each, at most 29 min in all; QUICK=1 for a ~2 min smoke
## test). Method: docs/BENCH.md.
bench-compare:
	bash bench/compare.sh

## bench-transports: the mesh against --transport=jetstream (a 3-server NATS JetStream
## cluster of the pinned nats-server) and a plain NATS KV client at N = 3, 5, 9, 17
## sidecars (watchers), 500 events/s, and the JetStream transport saturated against the
## KV client; 3 interleaved runs (~20 min; QUICK=1 for a smoke test, ~1 min). Method and
## columns: bench/transports.sh --help.
bench-transports:
	bash bench/transports.sh

## bench-isolation: the wall-clock speed target of isolation on a quiet machine: with a
## frozen subscriber on a node, the other subscriber's delivery time within 1.2x of its
## time without (TestFrozenSubscriber with E2E_TIMING=1; make test only logs the ratio)
bench-isolation:
	E2E_TIMING=1 $(GO) -C test test -race -count=1 -run 'TestFrozenSubscriber$$' -v ./e2e/

## bench-memory: RSS of an idle node and of one holding 2 x 10,000 pending events (~30 s)
bench-memory:
	bash bench/memory.sh

## bench-state-memory: RSS of a node holding 1M keys of 100-byte payloads (~1 min)
bench-state-memory:
	bash bench/state-memory.sh

## bench-store: pebble against bbolt on the --data-dir workload, 3 interleaved runs
## (~15 min; its own module, bench/storebench). Figures go in docs/BENCHMARKS.md.
bench-store:
	bash bench/storebench/run.sh

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzBatcher -fuzztime=$(FUZZTIME) ./pkg/batcher/
	$(GO) test -run='^$$' -fuzz=FuzzReadSubmit -fuzztime=$(FUZZTIME) ./pkg/event/
	$(GO) test -run='^$$' -fuzz=FuzzReplicateBytes -fuzztime=$(FUZZTIME) ./pkg/fanout/
	$(GO) test -run='^$$' -fuzz=FuzzReadEvent -fuzztime=$(FUZZTIME) ./pkg/event/
	$(GO) test -run='^$$' -fuzz=FuzzEachDelivery -fuzztime=$(FUZZTIME) ./internal/wire/
	$(GO) test -run='^$$' -fuzz=FuzzTable -fuzztime=$(FUZZTIME) ./pkg/state/
	$(GO) test -run='^$$' -fuzz=FuzzPageToken -fuzztime=$(FUZZTIME) ./pkg/fanout/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeValue -fuzztime=$(FUZZTIME) ./pkg/store/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeClock -fuzztime=$(FUZZTIME) ./pkg/store/
	$(GO) test -run='^$$' -fuzz=FuzzServe -fuzztime=$(FUZZTIME) ./pkg/antientropy/
	$(GO) test -run='^$$' -fuzz=FuzzApplySync -fuzztime=$(FUZZTIME) ./pkg/fanout/
	$(GO) test -run='^$$' -fuzz='FuzzParse$$' -fuzztime=$(FUZZTIME) ./pkg/discovery/
	$(GO) test -run='^$$' -fuzz=FuzzParseServer -fuzztime=$(FUZZTIME) ./pkg/discovery/
	$(GO) test -run='^$$' -fuzz='FuzzKey$$' -fuzztime=$(FUZZTIME) ./pkg/jetstream/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeKey -fuzztime=$(FUZZTIME) ./pkg/jetstream/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeMessage -fuzztime=$(FUZZTIME) ./pkg/jetstream/
	$(GO) test -run='^$$' -fuzz=FuzzDecodePosition -fuzztime=$(FUZZTIME) ./pkg/jetstream/

clean:
	rm -rf bin
