#!/usr/bin/env bash
# scripts/bench.sh (make bench): the end-to-end delivery benchmark.
#
#   scripts/bench.sh [bench/e2e flags]     e.g. -jobs 20000 -senders 16 -runs 3 -out bin/new.txt
#
# Starts the local stack with Postfix's smtp-sink (127.0.0.1:2525), builds the Postline worker and
# the naive baseline into bin/, then runs bench/e2e: the worker, the naive worker and raw smtp-source
# into the same sink, side by side in one run. The Markdown table goes to stdout, benchstat lines
# to bin/bench-e2e.txt (or -out). See `go run ./bench/e2e -h` for the flags.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/stack.sh up --with-sink >&2

mkdir -p bin
go build -o bin/worker ./cmd/worker
go build -o bin/naive ./bench/naive

SMTP_SOURCE="$(scripts/stack.sh smtp-source-path)"

CMD=(go run ./bench/e2e -smtp-source "$SMTP_SOURCE" -worker-bin bin/worker -naive-bin bin/naive "$@")
printf 'bench: command: scripts/bench.sh %s\n' "$*" >&2
printf 'bench: runs:   ' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"
