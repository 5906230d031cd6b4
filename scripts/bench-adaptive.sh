#!/usr/bin/env bash
# scripts/bench-adaptive.sh (make bench-adaptive): the retry-policy simulator.
#
#   scripts/bench-adaptive.sh [bench/adaptive flags]   e.g. -budgets=false -md bin/adaptive.md
#
# Runs uniform exponential backoff, the reference model and the adaptive policy side by side on a
# virtual clock (no services needed), prints the Markdown table with the targets and writes
# docs/adaptive-sim.png. See `go run ./bench/adaptive -h` for the model's parameters.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CMD=(go run ./bench/adaptive "$@")
printf 'bench-adaptive: command:' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"
