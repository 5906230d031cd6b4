#!/usr/bin/env bash
# scripts/demo.sh (make demo): start the local stack, run one worker and the
# retry scheduler, publish 1,000 mail jobs and show them delivered to
# Mailpit, then stop both.
#
#   scripts/demo.sh [COUNT]      COUNT defaults to 1000
#
# Mailpit keeps the mail: open its API at http://127.0.0.1:8025/api/v1/messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
COUNT="${1:-1000}"
MAILPIT_API="http://127.0.0.1:8025/api/v1"
HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_HTTP_PORT:-8081}"
LOG="$ROOT/.stack/logs/demo-worker.log"

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

say "starting the stack (Kafka, PostgreSQL, Mailpit)"
scripts/stack.sh up

say "building worker, retry-scheduler and postctl into bin/"
go build -o bin/ ./cmd/...

# The demo uses the defaults, which point at the local stack.
export POSTLINE_HTTP_ADDR="$HTTP_ADDR"
bin/postctl migrate
bin/postctl topics create

mailpit_count() {
	curl -sf "$MAILPIT_API/info" | grep -o '"Messages":[0-9]*' | cut -d: -f2
}
before="$(mailpit_count)"

say "starting the worker (log: ${LOG#"$ROOT"/})"
mkdir -p "$(dirname "$LOG")"
bin/worker >"$LOG" 2>&1 &
worker=$!
say "starting the retry scheduler (log: .stack/logs/demo-scheduler.log)"
POSTLINE_SCHEDULER_HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_SCHEDULER_PORT:-8082}" \
	bin/retry-scheduler >"$ROOT/.stack/logs/demo-scheduler.log" 2>&1 &
scheduler=$!
trap 'kill -TERM "$worker" "$scheduler" 2>/dev/null || true; wait "$worker" "$scheduler" 2>/dev/null || true' EXIT

deadline=$((SECONDS + 60))
until curl -sf "http://$HTTP_ADDR/readyz" >/dev/null; do
	if ! kill -0 "$worker" 2>/dev/null; then
		echo "the worker exited; its log:" >&2
		tail -20 "$LOG" >&2
		exit 1
	fi
	if ((SECONDS > deadline)); then
		echo "the worker did not become ready in 60 s: $(curl -s "http://$HTTP_ADDR/readyz")" >&2
		exit 1
	fi
	sleep 0.2
done

say "publishing $COUNT synthetic jobs to mail.jobs"
start=$(date +%s.%N)
bin/postctl publish --count "$COUNT"

say "waiting for Mailpit to hold $COUNT new messages"
deadline=$((SECONDS + 180))
while :; do
	now="$(mailpit_count)"
	delivered=$((now - before))
	if ((delivered >= COUNT)); then break; fi
	if ((SECONDS > deadline)); then
		echo "only $delivered of $COUNT delivered after 180 s; worker log: $LOG" >&2
		exit 1
	fi
	sleep 0.2
done
end=$(date +%s.%N)

sent="$(PGPASSWORD=postline psql -h 127.0.0.1 -U postline -d postline -Atc \
	"select count(*) from postline_messages where status = 'sent'")"
elapsed="$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }')"
rate="$(awk -v n="$COUNT" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')"

say "summary"
cat <<SUMMARY
published            $COUNT jobs
delivered (Mailpit)  $delivered new messages ($now in Mailpit in all, per $MAILPIT_API/info)
rows sent (Postgres) $sent in postline_messages, all runs
time                 ${elapsed} s from first publish to last delivery
throughput           ${rate} mails/s
SUMMARY
