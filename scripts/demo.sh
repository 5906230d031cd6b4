#!/usr/bin/env bash
# scripts/demo.sh (make demo): start the local stack, run one worker and the
# retry scheduler, publish 1,000 mail jobs and show them delivered to
# Mailpit, then show one job's status with postctl and stop both.
#
#   scripts/demo.sh [--show-topics] [COUNT]   COUNT defaults to 1000
#
# --show-topics prints the topics' partition tables (`postctl topics create`);
# without it they go to .stack/logs/demo-topics.log.
#
# POSTLINE_PG_PORT (as for scripts/stack.sh) selects the PostgreSQL port; the
# worker, postctl and psql all get it through POSTLINE_DATABASE_URL, unless
# that is set already. Mailpit keeps the mail: open its API at
# http://127.0.0.1:8025/api/v1/messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SHOW_TOPICS=false
COUNT=1000
for arg in "$@"; do
	case "$arg" in
	--show-topics) SHOW_TOPICS=true ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
		exit 0
		;;
	*[!0-9]* | '')
		echo "demo.sh: unknown argument $arg (want --show-topics or a job count)" >&2
		exit 2
		;;
	*) COUNT="$arg" ;;
	esac
done

MAILPIT_API="http://127.0.0.1:8025/api/v1"
HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_HTTP_PORT:-8081}"
LOGS="$ROOT/.stack/logs"
LOG="$LOGS/demo-worker.log"
PG_PORT="${POSTLINE_PG_PORT:-5432}"
export POSTLINE_DATABASE_URL="${POSTLINE_DATABASE_URL:-postgres://postline:postline@127.0.0.1:$PG_PORT/postline?sslmode=disable}"

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

say "starting the stack (Kafka, PostgreSQL on 127.0.0.1:$PG_PORT, Mailpit)"
scripts/stack.sh up

say "building worker, retry-scheduler and postctl into bin/"
go build -o bin/ ./cmd/...

mkdir -p "$LOGS"
# Everything else uses the defaults, which point at the local stack.
export POSTLINE_HTTP_ADDR="$HTTP_ADDR"
bin/postctl migrate >"$LOGS/demo-migrate.log"
if $SHOW_TOPICS; then
	bin/postctl topics create | tee "$LOGS/demo-topics.log"
else
	bin/postctl topics create >"$LOGS/demo-topics.log"
	topics="$(sed -n 's/^\([^ ][^:]*\): [0-9]* partition.*/\1/p' "$LOGS/demo-topics.log" | paste -sd' ')"
	say "topics ready: $topics"
	echo "   (their partition tables: ${LOGS#"$ROOT"/}/demo-topics.log, or scripts/demo.sh --show-topics)"
fi

mailpit_count() {
	curl -sf "$MAILPIT_API/info" | grep -o '"Messages":[0-9]*' | cut -d: -f2
}
psql_() {
	psql "$POSTLINE_DATABASE_URL" -X -Atc "$1"
}
before="$(mailpit_count)"

say "starting the worker (log: ${LOG#"$ROOT"/}) and the retry scheduler (log: .stack/logs/demo-scheduler.log)"
bin/worker >"$LOG" 2>&1 &
worker=$!
POSTLINE_SCHEDULER_HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_SCHEDULER_PORT:-8082}" \
	bin/retry-scheduler >"$LOGS/demo-scheduler.log" 2>&1 &
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
next_report=$((SECONDS + 2))
while :; do
	now="$(mailpit_count)"
	delivered=$((now - before))
	if ((delivered >= COUNT)); then break; fi
	if ((SECONDS > deadline)); then
		echo "only $delivered of $COUNT delivered after 180 s; worker log: $LOG" >&2
		exit 1
	fi
	if [[ -t 1 ]]; then
		printf '\r   delivered %d of %d' "$delivered" "$COUNT"
	elif ((SECONDS >= next_report)); then
		printf '   delivered %d of %d\n' "$delivered" "$COUNT"
		next_report=$((SECONDS + 2))
	fi
	sleep 0.2
done
end=$(date +%s.%N)
[[ -t 1 ]] && printf '\r\033[K'

sent="$(psql_ "select count(*) from postline_messages where status = 'sent' and sent_at >= to_timestamp($start)")"
sample="$(psql_ "select message_id from postline_messages where status = 'sent' and sent_at >= to_timestamp($start) order by sent_at desc limit 1")"
elapsed="$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }')"
rate="$(awk -v n="$COUNT" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')"

say "summary"
cat <<SUMMARY
published            $COUNT jobs
delivered (Mailpit)  $delivered new messages ($now in Mailpit in all)
rows sent (Postgres) $sent in postline_messages from this run
time                 ${elapsed} s from first publish to last delivery
throughput           ${rate} mails/s
SUMMARY

if [[ -n $sample ]]; then
	say "one of them, as postctl sees it: bin/postctl status '$sample'"
	bin/postctl status "$sample"
	cat <<TRY

Try it yourself (the stack keeps running; scripts/stack.sh down stops it):
  bin/postctl status '$sample'
  bin/postctl lag        # the worker group's lag per partition
  http://127.0.0.1:8025  # Mailpit's web UI, with the delivered mail
TRY
else
	echo "no row of this run is sent in postline_messages: see $LOG" >&2
	exit 1
fi
