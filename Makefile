# Thin entry points: the work lives in scripts/ and in the go tool.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

.PHONY: stack stack-down build test test-short fuzz vet fmt demo bench bench-memory bench-adaptive bench-scale soak

## stack: start Kafka, PostgreSQL and Mailpit on loopback (scripts/stack.sh up)
stack:
	scripts/stack.sh up

## stack-down: stop the local stack, keep data and caches
stack-down:
	scripts/stack.sh down

## build: build every binary under cmd/ into bin/
build:
	mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

## test: start the stack and the three-broker cluster, then run every test (unit and integration) with -race
# The end-to-end package, the longest, is listed first so that it starts first. bench/adaptive runs
# beside the rest without -race: its tests are a deterministic simulation and a harness around the
# worker binary (whose packages run under -race here), and the race detector makes them seven times
# slower (about 4 minutes) for nothing it could find.
test:
	scripts/stack.sh up --with-cluster
	eval "$$(scripts/stack.sh env)" && eval "$$(scripts/stack.sh cluster env)" && { \
		$(GO) test -count=1 -timeout 10m ./bench/adaptive & adaptive=$$!; \
		if $(GO) test -race -count=1 -timeout 20m ./test/e2e $$($(GO) list ./... | grep -v '/bench/adaptive$$'); then rc=0; else rc=$$?; fi; \
		if ! wait $$adaptive; then rc=1; fi; \
		exit $$rc; }

## test-short: unit tests only; integration tests skip under -short
test-short:
	$(GO) test -short -race ./...

## fuzz: run every fuzz target in the module for FUZZTIME each (default 30s), found with go test -list
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

## vet: go vet every package
vet:
	$(GO) vet ./...

## fmt: gofmt every Go file in place
fmt:
	gofmt -l -w .

## demo: run the end-to-end demo against the local stack
demo: stack
	scripts/demo.sh

## bench: run the delivery benchmarks against the local stack and smtp-sink (the Postfix relay, the baseline worker and the memory burst included), then the scaling, sweep, re-drive and console search tables
bench:
	scripts/stack.sh up --with-sink
	scripts/bench.sh

## bench-memory: only the memory burst: 2,000 ~900 KB jobs through one worker under a 512 MiB cgroup limit, beside its baselines
bench-memory:
	scripts/stack.sh up --with-sink
	scripts/bench.sh -variants memory

## bench-adaptive: uniform vs reference vs adaptive retry policies, simulated and on the real worker against a throttling relay
bench-adaptive:
	scripts/stack.sh up
	scripts/bench-adaptive.sh

## bench-scale: 1, 2 and 4 worker processes in one group against a latency-bound relay (4,000 jobs, 8 partitions, 20 ms per reply)
bench-scale:
	scripts/stack.sh up
	$(GO) build -o bin/worker ./cmd/worker
	$(GO) run ./bench/scale -worker-bin bin/worker

## soak: 1,000,000 small jobs through two workers into smtp-sink: rate, RSS and table size over time (SOAK_ARGS, e.g. -jobs 100000)
# bench/soak runs an unmeasured 300,000-job soak without aging first (-warmup-jobs): a freshly
# started broker's JIT would make the first window slower and flatter the ratio. SOAK_ARGS=-runs 3
# runs three measured soaks after it and judges the rate on their median ratio (runs.md).
soak:
	scripts/stack.sh up --with-sink
	$(GO) build -o bin/worker ./cmd/worker
	eval "$$(scripts/stack.sh env)" && $(GO) run ./bench/soak -worker-bin bin/worker \
		-kafka-pid-file .stack/kafka.pid -sink-pid-file .stack/smtp-sink.pid \
		-postgres-pid-file "$$(cat .stack/pg-location 2>/dev/null || echo .stack/pg)/postmaster.pid" $(SOAK_ARGS)
