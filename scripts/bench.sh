#!/usr/bin/env bash
# scripts/bench.sh (make bench): the end-to-end delivery benchmark.
#
#   scripts/bench.sh [bench/e2e flags]     e.g. -jobs 20000 -senders 16 -runs 3 -out bin/new.txt
#   scripts/bench.sh -variants memory      only the memory burst (make bench-memory)
#
# Starts the local stack with Postfix's smtp-sink (127.0.0.1:2525), builds the Postline worker and
# the naive baseline into bin/, then runs bench/e2e: the worker, the worker on template jobs (each
# naming a stored template it renders), the naive worker and raw smtp-source into the same sink, side
# by side in one run, then the memory burst (2,000 ~900 KB jobs through one
# worker in a 512 MiB cgroup v1 memory group, beside the same burst with the byte bounds lifted and
# through the worker of MEMORY_OLD_REV, before the byte bounds, which it builds into
# bin/worker-pre-byte-bounds from `git archive`). The Markdown tables go to stdout, benchstat lines
# to bin/bench-e2e.txt (or -out). See `go run ./bench/e2e -h` for the flags.
#
# The memory burst needs root and a writable /sys/fs/cgroup/memory (cgroup v1); without it the run
# fails with the reason rather than measure without the limit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/stack.sh up --with-sink >&2

mkdir -p bin
go build -o bin/worker ./cmd/worker
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

SMTP_SOURCE="$(scripts/stack.sh smtp-source-path)"

CMD=(go run ./bench/e2e -smtp-source "$SMTP_SOURCE" -worker-bin bin/worker -naive-bin bin/naive ${OLD_ARGS[@]+"${OLD_ARGS[@]}"} "$@")
printf 'bench: command: scripts/bench.sh %s\n' "$*" >&2
printf 'bench: runs:   ' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"
