#!/usr/bin/env bash
# scripts/demo.sh (make demo): start the local stack and run the whole loop on it: one worker and the
# retry scheduler send COUNT mail jobs through the stack's Postfix relay to a destination (a Mailpit
# that refuses a few addresses), Postfix returns real delivery reports (DSNs) for those to the
# bounce domain, the bounce-receiver turns them into bounces and suppressions, one bulk mail is
# unsubscribed with its one-click List-Unsubscribe URL, and the webhook-dispatcher posts every
# event, signed, to a local endpoint (examples/webhook-receiver) that verifies each signature.
# Prints a summary and one job's status with postctl. The operator console runs beside them on
# 127.0.0.1 with an account `demo` whose password is made afresh each run and printed once: in a
# terminal it stays up, showing this run's mail, until you press Enter. Then the demo stops what it
# started (the stack keeps running).
#
#   scripts/demo.sh [--show-topics] [COUNT]   COUNT defaults to 1000
#
# --show-topics prints the topics' partition tables (`postctl topics create`);
# without it they go to .stack/logs/demo-topics.log.
#
# POSTLINE_PG_PORT (as for scripts/stack.sh) selects the PostgreSQL port; the
# worker, postctl and psql all get it through POSTLINE_DATABASE_URL, unless
# that is set already. The destination Mailpit keeps the mail while the demo
# runs: its API is http://127.0.0.1:8026/api/v1/messages.
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

# The destination behind Postfix: the stack's Postfix relays to 127.0.0.1:2527 and sends mail for
# the bounce domain to 127.0.0.1:2530, where the bounce-receiver listens.
DEST_SMTP="127.0.0.1:2527"
DEST_HTTP="127.0.0.1:8026"
MAILPIT_API="http://$DEST_HTTP/api/v1"
BOUNCE_DOMAIN="bounces.postline.test"
RECEIVER_SMTP="127.0.0.1:${POSTLINE_BOUNCE_PORT:-2530}"
RECEIVER_HTTP="127.0.0.1:8083"  # /metrics, /healthz, /readyz
RECEIVER_HOOKS="127.0.0.1:8086" # the one-click unsubscribe URLs (and provider webhooks)
DISPATCHER_HTTP="127.0.0.1:8084"
ENDPOINT="127.0.0.1:8090" # examples/webhook-receiver
CONSOLE="127.0.0.1:${POSTLINE_DEMO_CONSOLE_PORT:-8091}" # the operator console, plain HTTP on loopback only
CONSOLE_HTTP="127.0.0.1:8085"                            # its /metrics, /healthz, /readyz
CONSOLE_USER="demo"
REFUSED=5                 # recipients the destination refuses: Postfix returns a DSN for each
BULK=3                    # bulk mails, which carry one-click List-Unsubscribe headers
HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_HTTP_PORT:-8081}"
LOGS="$ROOT/.stack/logs"
LOG="$LOGS/demo-worker.log"
PG_PORT="${POSTLINE_PG_PORT:-5432}"
export POSTLINE_DATABASE_URL="${POSTLINE_DATABASE_URL:-postgres://postline:postline@127.0.0.1:$PG_PORT/postline?sslmode=disable}"

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

say "starting the stack (Kafka, PostgreSQL on 127.0.0.1:$PG_PORT, Mailpit, Postfix)"
scripts/stack.sh up

say "building the binaries and the example webhook endpoint into bin/"
go build -o bin/ ./cmd/... ./examples/webhook-receiver

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
# wait_ready URL NAME PID LOG: wait up to 60 s for URL to answer 2xx while PID runs.
wait_ready() {
	local deadline=$((SECONDS + 60))
	until curl -sf "$1" >/dev/null; do
		if ! kill -0 "$3" 2>/dev/null; then
			echo "$2 exited; its log ($4):" >&2
			tail -20 "$4" >&2
			exit 1
		fi
		if ((SECONDS > deadline)); then
			echo "$2 did not become ready in 60 s: $(curl -s "$1")" >&2
			exit 1
		fi
		sleep 0.2
	done
}
pids=()
stop_all() {
	((${#pids[@]})) || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap stop_all EXIT

# Secrets of this demo only, made once and kept under .stack/: the return path keys (the workers
# sign each recipient's return path and unsubscribe link with them, the receiver checks them) and
# the webhook endpoint's signing secret.
mkdir -p .stack/demo
[[ -s .stack/demo/return-path-keys ]] || openssl rand -hex 32 >.stack/demo/return-path-keys
[[ -s .stack/demo/webhook-secret ]] || printf 'whsec_%s\n' "$(openssl rand -base64 32)" >.stack/demo/webhook-secret
export POSTLINE_RETURN_PATH_KEYS="$(cat .stack/demo/return-path-keys)"
WEBHOOK_SECRET="$(cat .stack/demo/webhook-secret)"
export POSTLINE_BOUNCE_DOMAIN="$BOUNCE_DOMAIN"
cat >.stack/demo/webhooks.yaml <<YAML
endpoints:
  - {id: demo, url: 'http://$ENDPOINT/hooks', secret_env: DEMO_WEBHOOK_SECRET}
YAML

say "starting the destination (a Mailpit on $DEST_SMTP that refuses nobody-*@example.test), the bounce-receiver on $RECEIVER_SMTP, the example webhook endpoint on $ENDPOINT and the webhook-dispatcher"
rm -f .stack/demo/mailpit.db* # each run's destination starts empty
"$HOME/.cache/postline/bin/mailpit" --smtp "$DEST_SMTP" --listen "$DEST_HTTP" --database "$ROOT/.stack/demo/mailpit.db" \
	--smtp-allowed-recipients '^(user|bulk)[0-9]+@example\.test$' >"$LOGS/demo-destination.log" 2>&1 &
pids+=($!)
POSTLINE_BOUNCE_SMTP_ADDR="$RECEIVER_SMTP" POSTLINE_RECEIVER_HTTP_ADDR="$RECEIVER_HTTP" POSTLINE_HOOKS_ADDR="$RECEIVER_HOOKS" \
	bin/bounce-receiver >"$LOGS/demo-receiver.log" 2>&1 &
pids+=($!)
wait_ready "http://$RECEIVER_HTTP/readyz" "the bounce-receiver" "${pids[-1]}" "$LOGS/demo-receiver.log"
WEBHOOK_SECRET="$WEBHOOK_SECRET" bin/webhook-receiver -addr "$ENDPOINT" >"$LOGS/demo-endpoint.log" 2>&1 &
pids+=($!)
DEMO_WEBHOOK_SECRET="$WEBHOOK_SECRET" POSTLINE_WEBHOOKS_FILE="$ROOT/.stack/demo/webhooks.yaml" POSTLINE_WEBHOOKS_HTTP_ADDR="$DISPATCHER_HTTP" \
	bin/webhook-dispatcher >"$LOGS/demo-dispatcher.log" 2>&1 &
pids+=($!)
wait_ready "http://$DISPATCHER_HTTP/readyz" "the webhook-dispatcher" "${pids[-1]}" "$LOGS/demo-dispatcher.log"

say "starting the operator console on http://$CONSOLE (it indexes mail.events for the mails' pages)"
POSTLINE_CONSOLE_ADDR="$CONSOLE" POSTLINE_CONSOLE_HTTP_ADDR="$CONSOLE_HTTP" bin/console >"$LOGS/demo-console.log" 2>&1 &
pids+=($!)
wait_ready "http://$CONSOLE_HTTP/readyz" "the console" "${pids[-1]}" "$LOGS/demo-console.log"
# A fresh password each run, printed once at the end and given to postctl on its standard input
# (never as an argument); setting it ends the sessions of earlier runs.
CONSOLE_PASSWORD="$(openssl rand -base64 18)"
if bin/postctl operators ls | grep -q "^$CONSOLE_USER "; then
	printf '%s\n' "$CONSOLE_PASSWORD" | bin/postctl operators passwd "$CONSOLE_USER" >/dev/null
else
	printf '%s\n' "$CONSOLE_PASSWORD" | bin/postctl operators add "$CONSOLE_USER" --role operator >/dev/null
fi
if bin/postctl operators ls | grep -q "^$CONSOLE_USER .* disabled "; then
	echo "   the console account $CONSOLE_USER is disabled (postctl operators disable): its login will be refused" >&2
fi
dest_before="$(mailpit_count)"
psql_() {
	psql "$POSTLINE_DATABASE_URL" -X -Atc "$1"
}

say "starting the worker, through Postfix on 127.0.0.1:2526 with return paths on $BOUNCE_DOMAIN (log: ${LOG#"$ROOT"/}), and the retry scheduler"
POSTLINE_SMTP_PORT=2526 POSTLINE_UNSUBSCRIBE_URL="http://$RECEIVER_HOOKS/unsubscribe" bin/worker >"$LOG" 2>&1 &
pids+=($!)
POSTLINE_SCHEDULER_HTTP_ADDR="127.0.0.1:${POSTLINE_DEMO_SCHEDULER_PORT:-8082}" \
	bin/retry-scheduler >"$LOGS/demo-scheduler.log" 2>&1 &
pids+=($!)
wait_ready "http://$HTTP_ADDR/readyz" "the worker" "${pids[-2]}" "$LOG"

say "publishing $COUNT synthetic jobs, $REFUSED to addresses the destination refuses and $BULK bulk mails"
run="$(date +%s)" # this run's addresses: an earlier run suppressed its own
{
	for i in $(seq 1 "$REFUSED"); do
		printf '{"version":1,"from":"demo@example.com","to":["nobody-%s-%s@example.test"],"subject":"Hello %s","text":"This address does not exist."}\n' "$run" "$i" "$i"
	done
	for i in $(seq 1 "$BULK"); do
		printf '{"version":1,"from":"news@example.com","to":["bulk%s%s@example.test"],"subject":"Newsletter %s","text":"Our news.","priority":"bulk"}\n' "$run" "$i" "$i"
	done
} >.stack/demo/jobs.jsonl
start=$(date +%s.%N)
bin/postctl publish --file .stack/demo/jobs.jsonl >/dev/null
bin/postctl publish --count "$COUNT"
COUNT=$((COUNT + BULK)) # what the destination takes
before="$dest_before"

say "waiting for the destination to hold $COUNT new messages"
deadline=$((SECONDS + 180))
next_report=$((SECONDS + 2))
while :; do
	now="$(mailpit_count)"
	delivered=$((now - before))
	if ((delivered >= COUNT)); then break; fi
	if ((SECONDS > deadline)); then
		echo "only $delivered of $COUNT delivered after 180 s; worker log: $LOG, Postfix log: .stack/logs/postfix.log" >&2
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

# await SECONDS WHAT CMD...: run CMD until it succeeds, at most SECONDS.
await() {
	local deadline=$((SECONDS + $1)) what=$2
	shift 2
	until "$@"; do
		if ((SECONDS > deadline)); then
			echo "$what: not done after the wait; logs in ${LOGS#"$ROOT"/}/demo-*.log" >&2
			exit 1
		fi
		sleep 0.5
	done
}
bounced_count() { psql_ "select count(*) from postline_recipients where state = 'bounced' and address like 'nobody-$run-%@example.test'"; }
say "waiting for Postfix's delivery reports: $REFUSED recipients bounced"
bounces_in() { (($(bounced_count) >= REFUSED)); }
await 120 "the bounces" bounces_in

unsub_addr="bulk${run}1@example.test"
say "unsubscribing $unsub_addr with the one-click URL in its List-Unsubscribe header"
bulk_id="$(curl -sf "$MAILPIT_API/search?query=to:$unsub_addr" | grep -o '"ID":"[^"]*"' | head -1 | cut -d'"' -f4 || true)"
# Mailpit's JSON writes < and > as \u003c and \u003e: the first URI is the https (here http) one.
unsub_url="$(curl -sf "$MAILPIT_API/message/$bulk_id/headers" | sed -n 's/.*"List-Unsubscribe":\["\\u003c\([^\\]*\)\\u003e.*/\1/p' || true)"
if [[ -z $unsub_url ]]; then
	echo "the bulk mail to $unsub_addr has no List-Unsubscribe URL (message '$bulk_id' at the destination)" >&2
	exit 1
fi
curl -sf -X POST --data 'List-Unsubscribe=One-Click' "$unsub_url" >/dev/null

stats() { curl -sf "http://$ENDPOINT/stats"; }
stat_of() {
	local n
	n="$(stats | grep -o "\"$1\":[0-9]*" | head -1 | cut -d: -f2)"
	echo "${n:-0}"
}
say "waiting for the webhooks: every event at the endpoint, signature verified"
# accepted for each delivered mail, bounced for each refused one, one unsubscribed
webhooks_in() { (($(stat_of accepted) >= COUNT && $(stat_of bounced) >= REFUSED && $(stat_of unsubscribed) >= 1)); }
await 120 "the webhooks" webhooks_in

sent="$(psql_ "select count(*) from postline_messages where status = 'sent' and sent_at >= to_timestamp($start)")"
bounced="$(bounced_count)"
suppressed="$(psql_ "select count(*) from postline_suppressions where address like 'nobody-$run-%@example.test'")"
unsubscribed="$(psql_ "select count(*) from postline_suppressions where address = '$unsub_addr' and reason = 'unsubscribe'")"
sample="$(psql_ "select message_id from postline_messages where status = 'sent' and sent_at >= to_timestamp($start) order by sent_at desc limit 1")"
elapsed="$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }')"
rate="$(awk -v n="$COUNT" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')"

say "summary"
cat <<SUMMARY
published            $((COUNT + REFUSED)) jobs
delivered            $delivered new messages at the destination, through Postfix
rows sent (Postgres) $sent in postline_messages from this run
time                 ${elapsed} s from first publish to last delivery
throughput           ${rate} mails/s
bounced              $bounced recipients, from Postfix's delivery reports (DSNs) to their return paths
suppressed           $suppressed of those addresses (hard bounces), $unsubscribed unsubscribed from the bulk stream
webhooks             $(stat_of verified) verified by the endpoint ($(stat_of rejected) rejected), by type: $(stats | grep -o '"by_type":{[^}]*}' | sed 's/"by_type"://')
SUMMARY

if [[ -n $sample ]]; then
	say "one of them, as postctl sees it: bin/postctl status '$sample'"
	bin/postctl status "$sample"
	# The console's page of a bounced mail shows its life once the console indexed its events.
	bounced_id="$(psql_ "select message_id from postline_recipients where state = 'bounced' and address = 'nobody-$run-1@example.test' limit 1")"
	indexed() { (($(psql_ "select count(*) from postline_mail_events where message_id = '$bounced_id' and type = 'bounced'") > 0)); }
	await 30 "the console's index of the bounce" indexed
	cat <<TRY

Try it yourself (the stack keeps running; scripts/stack.sh down stops it):
  bin/postctl status '$sample'
  bin/postctl lag        # the worker group's lag per partition
  bin/postctl webhooks ls  # the webhook endpoint's state
  bin/postctl suppress ls # the suppression lists
TRY
else
	echo "no row of this run is sent in postline_messages: see $LOG" >&2
	exit 1
fi

say "the operator console: http://$CONSOLE"
cat <<CONSOLE_LOGIN
  name      $CONSOLE_USER
  password  $CONSOLE_PASSWORD   (made for this run, shown once; each run sets a new one)
  a bounce  http://$CONSOLE/mail/view?id=$bounced_id
  search    recipient @example.test, or state bounced; lift a suppression; read the audit log
CONSOLE_LOGIN
if [[ -t 0 && -t 1 ]]; then
	read -r -p "The console runs until you press Enter (then the demo's processes stop; the stack keeps running) " _ || true
else
	echo "(not a terminal: the console stops with the demo now; run scripts/demo.sh in a terminal to keep it up)"
fi
