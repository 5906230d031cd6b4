#!/usr/bin/env bash
# scripts/bench-adaptive.sh (make bench-adaptive): the retry-policy simulator.
#
#   scripts/bench-adaptive.sh [bench/adaptive flags]   e.g. -seed 2 -md bin/adaptive.md -png bin/adaptive-sim.png
#
# Runs (a) uniform exponential backoff, (b) the reference model and (c) the adaptive policy side by side
# on a virtual clock (no services needed) over the same transport (senders, delay tiers, scheduler
# jitter); retry budgets, pacing and AIMD belong to (c) only. Prints the parameters, the lower bound on
# mean latency, the comparison table and PASS / FAIL / UNREACHABLE per target of issue 4, and writes the
# delivered-over-time plot to -png (default bin/adaptive-sim.png). A full run takes a few seconds.
# See `go run ./bench/adaptive -h` for the model's parameters.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CMD=(go run ./bench/adaptive "$@")
printf 'bench-adaptive: command:' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"
