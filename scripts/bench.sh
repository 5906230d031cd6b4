#!/usr/bin/env bash
# scripts/bench.sh (make bench): the end-to-end delivery benchmark, then the scaling table, the
# unconfirmed sweep's, the guarded re-drive's and the console search's.
#
#   scripts/bench.sh [--no-scale] [--no-sweep] [--no-redrive] [--no-search] [bench/e2e flags]   e.g. -jobs 20000 -senders 16 -runs 3 -out bin/new.txt
#   scripts/bench.sh -variants memory      only the memory burst (make bench-memory)
#   scripts/bench.sh -variants postline,postfix,smtp-source-d -jobs 5000   a quick headline run
#   scripts/bench.sh -variants postline,outcomes -jobs 5000   the outcome loop against plain mail
#   scripts/bench.sh -variants postline,noindex -jobs 5000 -runs 3   what the recipient search indexes cost
#   scripts/bench.sh -variants postline,smtp-source-d,postfix,sizes -jobs 3000   the body-size table (1, 10, 100 KiB)
#
# Starts the local stack with Postfix's smtp-sink (127.0.0.1:2525), builds the Postline worker and
# webhook dispatcher, the worker of BASELINE_REV (default 4c91515, from `git archive`, into
# bin/worker-baseline) and the naive baseline into bin/, then runs bench/e2e: first a warm-up of
# 300,000 jobs through the current worker, not measured (-warmup-jobs; a freshly started broker's
# JIT would otherwise make the first rows slower), then the baseline worker and the current one alternating, the
# current one fed steadily at half that row's rate and given one mail at a time (halfload, lone: latency
# as users feel it), on a schema without the console's recipient search indexes (noindex: their cost), the
# worker on template jobs (each naming a stored template it renders), the worker with the outcome
# loop on (bounce domain, return paths, confirm phase, events) and the webhook dispatcher sending
# every event to an endpoint of the harness (mails/s and the webhook lag), the naive worker, raw
# smtp-source into the same sink, and a Postfix relay that bench/e2e configures and starts itself in
# front of that sink, side by side in one run, then those three again at 10 and 100 KiB bodies (sizes,
# -sizes; fewer mails above 10 KiB) in a table of their own; every row with its whole-stack CPU (the pid files
# of Kafka, PostgreSQL and smtp-sink below), then the memory burst (2,000 ~900 KB jobs through one
# worker in a 512 MiB cgroup v1 memory group, beside the same burst with the byte bounds lifted and
# through the worker of MEMORY_OLD_REV, before the byte bounds, which it builds into
# bin/worker-pre-byte-bounds from `git archive`). The Markdown tables go to stdout, benchstat lines
# to bin/bench-e2e.txt (or -out). See `go run ./bench/e2e -h` for the flags.
#
# After the e2e tables it runs the horizontal scaling benchmark (`go run ./bench/scale -worker-bin
# bin/worker`, make bench-scale, about 3 minutes). A run given -variants (a partial, quick run) or
# --no-scale skips it.
#
# Last, the unconfirmed sweep's table (`go run ./bench/sweep`, about 2 minutes): the time of one pass
# that handles 1,000 recipients come due, with 10k, 100k and 1M silent recipients in PostgreSQL, the
# ratio to the 10k pass, and PASS or FAIL against 1.5x (the run then fails). A run given -variants or
# --no-sweep skips it.
#
# Then the guarded re-drive's table (`go run ./bench/redrive`, about half a minute): 10,000 dead
# letters re-driven at a bound of 500 a second, the time against the 20 s that bound gives (PASS
# within 10 %), and a second identical re-drive that must re-drive none. A run given -variants or
# --no-redrive skips it.
#
# Last, the console's search table (`go run ./bench/search`): recipient searches and mail pages
# through internal/mailquery over 10,000,000 seeded mails, p99 against 100 and 50 ms (PASS or FAIL,
# the run then fails). The seed (13 GiB, about 8 to 12 minutes) is kept in the schema bench_search
# between runs and re-used while it matches; `-drop` on a run removes it at its end (or DROP SCHEMA). A
# run given -variants or --no-search skips it.
#
# The memory burst needs root and a writable /sys/fs/cgroup/memory (cgroup v1); without it the run
# fails with the reason rather than measure without the limit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SCALE=1
SWEEP=1
REDRIVE=1
SEARCH=1
ARGS=()
for a in "$@"; do
  case $a in
  --no-scale) SCALE=0 ;;
  --no-sweep) SWEEP=0 ;;
  --no-redrive) REDRIVE=0 ;;
  --no-search) SEARCH=0 ;;
  -variants | -variants=* | --variants | --variants=*) SCALE=0 SWEEP=0 REDRIVE=0 SEARCH=0 ARGS+=("$a") ;;
  *) ARGS+=("$a") ;;
  esac
done

scripts/stack.sh up --with-sink >&2

mkdir -p bin
go build -o bin/worker ./cmd/worker
go build -o bin/webhook-dispatcher ./cmd/webhook-dispatcher
go build -o bin/naive ./bench/naive

# The worker before the byte bounds (POSTLINE_MAX_IN_FLIGHT_BYTES, POSTLINE_BATCH_BYTES): the
# memory burst's "before" row. Skipped, with a line saying so, when the commit is not in this clone.
MEMORY_OLD_REV="${MEMORY_OLD_REV:-61c3950}"
OLD_ARGS=()
if git rev-parse -q --verify "$MEMORY_OLD_REV^{commit}" >/dev/null; then
  old_src="$(mktemp -d)"
  git archive "$MEMORY_OLD_REV" | tar -x -C "$old_src"
  (cd "$old_src" && go build -o "$ROOT/bin/worker-pre-byte-bounds" ./cmd/worker)
  rm -rf "$old_src"
  OLD_ARGS=(-memory-old-bin bin/worker-pre-byte-bounds -memory-old-rev "$MEMORY_OLD_REV")
else
  printf 'bench: commit %s (the worker before the byte bounds) is not in this clone: the memory table has no pre-byte-bounds row\n' "$MEMORY_OLD_REV" >&2
fi

# The worker of an earlier commit: the baseline row, alternating with the current worker, that the
# "worker CPU per mail vs baseline" target divides by.
BASELINE_REV="${BASELINE_REV:-4c91515}"
if git rev-parse -q --verify "$BASELINE_REV^{commit}" >/dev/null; then
  base_src="$(mktemp -d)"
  git archive "$BASELINE_REV" | tar -x -C "$base_src"
  (cd "$base_src" && go build -o "$ROOT/bin/worker-baseline" ./cmd/worker)
  rm -rf "$base_src"
  OLD_ARGS+=(-baseline-bin bin/worker-baseline -baseline-rev "$BASELINE_REV")
else
  printf 'bench: commit %s (the baseline worker) is not in this clone: the table has no baseline row\n' "$BASELINE_REV" >&2
fi

# What bin/worker was built from, for the report: the commit, and whether the tree had changes.
WORKER_REV="$(git rev-parse --short HEAD)"
[[ -z "$(git status --porcelain -- cmd internal job go.mod go.sum)" ]] || WORKER_REV+="+uncommitted"
OLD_ARGS+=(-worker-rev "$WORKER_REV")

# The shared services whose CPU the pipeline columns count, by the pid files stack.sh keeps.
PIPELINE_ARGS=(-kafka-pid-file .stack/kafka.pid -sink-pid-file .stack/smtp-sink.pid)
PG_DATA="$(cat .stack/pg-location 2>/dev/null || printf '%s' .stack/pg)"
PIPELINE_ARGS+=(-postgres-pid-file "$PG_DATA/postmaster.pid")

SMTP_SOURCE="$(scripts/stack.sh smtp-source-path)"

CMD=(go run ./bench/e2e -smtp-source "$SMTP_SOURCE" -worker-bin bin/worker -naive-bin bin/naive
  -dispatcher-bin bin/webhook-dispatcher
  "${PIPELINE_ARGS[@]}" ${OLD_ARGS[@]+"${OLD_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"})
printf 'bench: command: scripts/bench.sh %s\n' "$*" >&2
printf 'bench: runs:   ' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"

# table LABEL CMD...: print the command on stderr, then run it after a blank line on stdout, for
# the tables that follow the e2e one.
table() {
  local label=$1
  shift
  printf 'bench: %s: ' "$label" >&2
  printf ' %q' "$@" >&2
  printf '\n' >&2
  printf '\n'
  "$@"
}

DATABASE_URL="${POSTLINE_TEST_DATABASE_URL:-postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable}"
((SCALE)) && table scaling go run ./bench/scale -worker-bin bin/worker
# The stack's PostgreSQL (and Kafka), in schemas and topics of each benchmark's own, removed at the
# end; the search keeps its seeded schema bench_search between runs.
((SWEEP)) && table "unconfirmed sweep" go run ./bench/sweep -database-url "$DATABASE_URL"
((REDRIVE)) && table "guarded re-drive" go run ./bench/redrive -database-url "$DATABASE_URL"
((SEARCH)) && table "console search" go run ./bench/search -database-url "$DATABASE_URL"
exit 0
