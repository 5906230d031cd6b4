#!/usr/bin/env bash
# scripts/bench-adaptive.sh (make bench-adaptive): retry policies side by side, simulated and real.
#
#   scripts/bench-adaptive.sh [bench/adaptive flags]   e.g. -seed 2 -real-jobs 500 -real=false
#   scripts/bench-adaptive.sh -real-scenarios drop -real-strategies adaptive     one real scenario alone
#
# Runs (a) uniform exponential backoff, (b) the reference model and (c) the adaptive policy:
#   1. on the simulator (virtual clock, no services; a few seconds): prints the parameters, the lower
#      bound on mean latency, the table and PASS / FAIL / UNREACHABLE per target of issue 4, and plots
#      bin/adaptive-sim.png;
#   2. for real (skip with -real=false): starts the local stack, builds bin/worker and
#      bin/retry-scheduler from this tree, and for each strategy (POSTLINE_RETRY_POLICY) and scenario
#      (main: a 50 mails/s, 5-connection relay; Postfix's: a relay that hangs up above 5 sessions)
#      runs the worker and the scheduler on fresh topics, groups and schema against a fresh bench/relay
#      on loopback, publishes the burst and waits until every job is sent, failed or dead. Prints the
#      real tables and targets and plots bin/adaptive-real.png. The runs go at once (-real-parallel);
#      the slowest strategy sets the duration, up to -real-timeout (30m);
#   3. the harder real scenarios (-real-scenarios; adaptive strategy, default settings, circuit breaker
#      on), each alone after main's and Postfix's: drop (50/s, 10/s from t=20s to t=140s, 5,000 jobs),
#      two-relays (40/s and 15/s at one priority), three-workers (a third worker joins at t=30s),
#      fivexx (550 5.7.1 with a retry hint above the rate), fleet200 (200/s burst 40, 3 % 451 4.3.0,
#      1 % 550 5.1.1, 20,000 jobs, two workers). Each prints its lower bound from the relays' capacity
#      and PASS / FAIL per target, a summary table across scenarios, and plots
#      bin/adaptive-real-<scenario>.png. The harder scenarios take about 9 minutes together (drop 3.5),
#      main's and Postfix's about 15 (the reference strategy's long retries): about 25 minutes in all.
# The report is also written to bin/adaptive.md. See `go run ./bench/adaptive -h` for every flag.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
real=true
for a in "$@"; do
	case "$a" in -real=false | --real=false) real=false ;; esac
done
mkdir -p bin
if [[ $real == true ]]; then
	scripts/stack.sh up >&2
	eval "$(scripts/stack.sh env)"
	go build -o bin/ ./cmd/worker ./cmd/retry-scheduler
fi
CMD=(go run ./bench/adaptive -md bin/adaptive.md -png bin/adaptive-sim.png -real-png bin/adaptive-real.png "$@")
printf 'bench-adaptive: command:' >&2
printf ' %q' "${CMD[@]}" >&2
printf '\n' >&2
"${CMD[@]}"
