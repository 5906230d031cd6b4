#!/usr/bin/env bash
# scripts/stack.sh: the local Postline stack without Docker.
#
#   scripts/stack.sh [up] [--with-sink]  start Kafka, PostgreSQL, Mailpit and the Postfix relay
#                                        (and smtp-sink)
#   scripts/stack.sh down                stop what `up` started (the cluster too); keep data and caches
#   scripts/stack.sh status              one line per service (and TLS endpoint); exit 1 if Kafka
#                                        (either listener), Postgres, Mailpit or Postfix is down
#   scripts/stack.sh env                 export lines for the POSTLINE_TEST_* variables
#   scripts/stack.sh sink                start only the Postfix smtp-sink on 127.0.0.1:2525
#   scripts/stack.sh sink-env            export lines for running smtp-source/smtp-sink by hand
#   scripts/stack.sh postfix             start (or reload) only the Postfix relay
#   scripts/stack.sh postfix-flush       delete every message in the relay's queue (postsuper -d ALL)
#   scripts/stack.sh postfix-queue       list the relay's queue (postqueue -p)
#   scripts/stack.sh postfix-log         print the path of the relay's mail log
#   scripts/stack.sh smtp-source-path    print the path of Postfix's smtp-source
#   scripts/stack.sh promtool-path       print the path of Prometheus's promtool
#   scripts/stack.sh prometheus-path     print the path of the prometheus server binary
#   scripts/stack.sh kcat-path           print the path of a kcat wrapper (Debian's kcat, unpacked)
#   scripts/stack.sh chromium            only install Debian's chromium (for UI tests) if missing
#   scripts/stack.sh cluster up          start the three-broker Kafka cluster (beside the single node)
#   scripts/stack.sh cluster down        stop its three brokers; keep their data
#   scripts/stack.sh cluster status      one line per broker; exit 1 if any is down
#   scripts/stack.sh cluster env         export line for POSTLINE_TEST_KAFKA_CLUSTER
#   scripts/stack.sh cluster kill N      SIGKILL broker N (1-3), for broker-failure tests
#   scripts/stack.sh cluster start N     start broker N again and wait until it serves
#   scripts/stack.sh up --with-cluster   `up`, with the cluster starting beside the other services
#
# Needs root: it runs `apt-get install`/`apt-get download` (Debian's postgresql, postfix,
# chromium, prometheus, kcat packages), runs PostgreSQL as the postgres OS user (runuser) and
# chowns its files. Also needs java 17+ and mvn (Kafka's jars), go (Mailpit), openssl
# (certificates), curl (Mailpit's readiness check) and dpkg-deb. `up` returns in well under a
# second when everything already runs; the first one fetches and builds (Mailpit's go install
# alone takes ~2 minutes).
#
# Services (all on loopback):
#   Kafka       127.0.0.1:9092 (PLAINTEXT), 127.0.0.1:9094 (SASL_SSL: SCRAM-SHA-512 user postline,
#               password in .stack/tls/kafka-password, certificate from .stack/tls/ca.pem),
#               127.0.0.1:9093 (CONTROLLER); single KRaft node from Maven Central jars; version in
#               deploy/kafka/pom.xml (<kafka.version>) only. A running broker started with another
#               rendering of deploy/kafka/server.properties.tmpl is restarted once by `up`.
#   PostgreSQL  127.0.0.1:${POSTLINE_PG_PORT:-5432}, role/db postline/postline, password postline;
#               Debian's packages, our own cluster (not Debian's 'main'). TLS on (sslmode=disable
#               still works; verify-full with sslrootcert=.stack/tls/ca.pem too). A changed config
#               is reloaded (restart only for port/socket/max_connections/shared_buffers).
#               shared_buffers ${POSTLINE_PG_SHARED_BUFFERS:-1GB}: PostgreSQL's 128 MB default held a
#               tenth of a million-mail table's working set, and the soak's rate fell by 30 % as it grew.
#               max_wal_size ${POSTLINE_PG_MAX_WAL_SIZE:-8GB} and checkpoint_timeout 15min: with the 1 GB
#               default a full-rate soak forced a checkpoint every 30 to 50 s, and the full-page images after
#               each grew with the table (pg_wal may hold up to that much on disk).
#               autovacuum_naptime 5s: with the 1 min default the rows the purge deleted were not
#               vacuumed within a soak, and the tables grew as if nothing had been purged.
#               Durable by default (fsync, synchronous_commit, full_page_writes on).
#               POSTLINE_PG_FAST=1 on `up` turns the three off for benchmarks: commits return
#               before they reach the disk, so a crash of the machine or the server may lose the
#               last commits or corrupt the cluster (rm -rf its data dir then). The next `up`
#               without it turns them back on (a reload, no restart).
#   Mailpit     SMTP 127.0.0.1:1025, API 127.0.0.1:8025.
#   smtp-sink   127.0.0.1:2525, only with `up --with-sink` or `sink`.
#   Postfix     127.0.0.1:${POSTLINE_POSTFIX_PORT:-2526}, a relay for DSN tests: Debian's postfix
#               (installed with "No configuration"), our own instance with config in
#               .stack/postfix/etc. Relays mail from 127.0.0.0/8 to the relayhost
#               [127.0.0.1]:${POSTLINE_POSTFIX_RELAYHOST_PORT:-2527}, where a test runs the
#               destination server, and mail for bounces.postline.test (the bounces and DSNs it
#               writes) to [127.0.0.1]:${POSTLINE_BOUNCE_PORT:-2530}, where a test runs the bounce
#               receiver. Nothing local, no TLS, retries every few seconds, undeliverable after
#               30 s. Mail log .stack/logs/postfix.log. A changed config is reloaded (restart
#               only when the queue moves).
#   Kafka cluster  only with `cluster up` or `up --with-cluster`: three combined broker+controller
#               KRaft nodes for failure tests. Nodes 1, 2, 3 serve PLAINTEXT on 127.0.0.1:19092,
#               :19192, :19292 and their controllers on :19093, :19193, :19293 (a static
#               three-voter quorum; node ids 1-3). Replication factor 3 for every topic (internal
#               ones too), min.insync.replicas 2, unclean leader election off, 6 partitions by
#               default, auto-create off. Same jars and version as the single node; 384 MiB heap
#               each, client compiler and serial GC (quick to boot on a busy machine). A broker is
#               fenced 4 s after its last heartbeat, so a killed one's partitions move in seconds.
#               Data in .stack/cluster/N/data, config .stack/cluster/N/server.properties, log
#               .stack/logs/cluster-N.log. A node whose rendered config changed is restarted by
#               `cluster up`; `cluster kill N` leaves it down until `cluster start N` or `cluster up`.
#   Prometheus  not a service: `up` unpacks promtool and prometheus from Debian's prometheus package
#               (extracted, never installed, so the package's own service never starts).
#   kcat        not a service: `up` unpacks Debian's kcat (and librdkafka1/libyajl2 if missing);
#               for the PLAINTEXT listener (its librdkafka cannot SCRAM with Kafka 4.x).
#   Chromium    not a service: `up` installs Debian's chromium (no recommends) if missing, for the
#               UI tests (internal/testenv.Browser runs it headless); `env` names it.
#
# State lives in .stack/ at the repo root (kafka-data, cluster/, pg, logs/, tls/, *.pid). .stack/tls holds a
# throwaway CA, a server certificate for 127.0.0.1/localhost signed by it, a second, untrusted CA
# (for tests that a foreign certificate is refused) and the random Kafka password: made once,
# issued again when missing or expiring within 7 days. The PostgreSQL data
# directory is .stack/pg when the postgres OS user can reach it, else
# /var/tmp/postline-pg-<hash of the repo path>/data (the repo may sit under a folder only root
# can enter). Postfix's config is .stack/postfix/etc; its queue and data directories are
# .stack/postfix/{queue,data} under the same rule (else /var/tmp/postline-postfix-<hash>/).
# Caches that survive a fresh clone: ${POSTLINE_CACHE:-$HOME/.cache/postline}
# (Kafka jars in kafka-<version>/libs, mailpit in bin/, postfix, prometheus, kcat, and apt/: the
# .debs apt downloads to install postfix and chromium, kept because Debian's images empty apt's
# own cache),
# ~/.m2, the Go module cache and apt's cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK="$ROOT/.stack"
LOGS="$STACK/logs"
CACHE="${POSTLINE_CACHE:-$HOME/.cache/postline}"
HASH="$(printf '%s' "$ROOT" | sha1sum | cut -c1-10)"

KAFKA_POM="$ROOT/deploy/kafka/pom.xml"
KAFKA_VERSION="$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$KAFKA_POM" | head -n1)"
KAFKA_LIBS="$CACHE/kafka-$KAFKA_VERSION/libs"
KAFKA_HOST=127.0.0.1
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
KAFKA_DATA="$STACK/kafka-data"
KAFKA_PID="$STACK/kafka.pid"
KAFKA_TIMEOUT="${POSTLINE_KAFKA_TIMEOUT:-180}"
KAFKA_SECURE_PORT=9094
KAFKA_SASL_USER=postline

# The three-broker cluster: node N (1-3) listens on 19092 + 100(N-1) (PLAINTEXT) and the port
# after it (CONTROLLER).
CLUSTER_NODES=(1 2 3)
CLUSTER_DIR="$STACK/cluster"
CLUSTER_TIMEOUT="${POSTLINE_CLUSTER_TIMEOUT:-180}"

TLS="$STACK/tls"
TLS_MIN_VALID=$((7 * 24 * 3600)) # issue certificates again when they expire within 7 days

PG_PORT="${POSTLINE_PG_PORT:-5432}"
PG_SOCK="/tmp/postline-pg-$HASH" # short: unix socket paths are limited to ~107 bytes

MAILPIT_VERSION=v1.33.1
MAILPIT_BIN="$CACHE/bin/mailpit"
MAILPIT_SMTP_PORT=1025
MAILPIT_HTTP_PORT=8025
MAILPIT_PID="$STACK/mailpit.pid"

SINK_PORT=2525
SINK_DIR="$CACHE/postfix"
SINK_PID="$STACK/smtp-sink.pid"

POSTFIX_PORT="${POSTLINE_POSTFIX_PORT:-2526}"
POSTFIX_RELAYHOST_PORT="${POSTLINE_POSTFIX_RELAYHOST_PORT:-2527}"
POSTFIX_BOUNCE_PORT="${POSTLINE_BOUNCE_PORT:-2530}"
POSTFIX_BOUNCE_DOMAIN=bounces.postline.test
POSTFIX_DIR="$STACK/postfix"
POSTFIX_CONF="$POSTFIX_DIR/etc"
POSTFIX_LOG="$LOGS/postfix.log"
APT_CACHE="$CACHE/apt" # .debs apt downloads (postfix, chromium)

CHROMIUM_BIN=/usr/bin/chromium

KCAT_DIR="$CACHE/kcat"
KCAT_WRAPPER="$KCAT_DIR/kcat"

PROM_DIR="$CACHE/prometheus"
PROMTOOL_BIN="$PROM_DIR/root/usr/bin/promtool"
PROMETHEUS_BIN="$PROM_DIR/root/usr/bin/prometheus"

log() { printf '%s\n' "$*"; }
die() { printf 'stack.sh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Generic helpers

# port_open HOST PORT: something accepts TCP connections there.
port_open() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# smtp_banner PORT: the server on 127.0.0.1:PORT greets with 220.
smtp_banner() {
  local line=""
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    IFS= read -r -t 3 line <&3 || exit 1
    printf 'QUIT\r\n' >&3 || true
    [[ $line == 220* ]]
  ) 2>/dev/null
}

# pid_alive PIDFILE PATTERN: the pid in PIDFILE runs and its command line contains PATTERN
# (guards against a recycled pid after a reboot).
pid_alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid="$(<"$1")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# spawned_alive PIDFILE: the process spawn started still exists, whatever it has exec'd so far.
# The wait after a spawn uses this, not pid_alive: until the forked shell has exec'd the
# service, its command line is this script's, and pid_alive would call it exited.
spawned_alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid="$(<"$1")"
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

# stop_pid NAME PIDFILE PATTERN: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
  local name=$1 file=$2 pattern=$3 pid i
  if ! pid_alive "$file" "$pattern"; then
    rm -f "$file"
    log "$name: not running"
    return 0
  fi
  pid="$(<"$file")"
  log "$name: stopping (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    [[ -d /proc/$pid ]] || break
    sleep 0.1
  done
  if [[ -d /proc/$pid ]]; then
    log "$name: did not stop in 30 s; killing"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
  log "$name: stopped"
}

# child_running PID: our background child PID has not exited (a zombie, not yet waited for, has).
child_running() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n $state && $state != Z ]]
}

# spawn PIDFILE LOGFILE CMD...: run CMD detached (own session, no stdin), record its pid.
spawn() {
  local pidfile=$1 logfile=$2
  shift 2
  setsid "$@" </dev/null >>"$logfile" 2>&1 6>&- 7>&- 8>&- &
  echo $! >"$pidfile"
}

tail_log() {
  [[ -f $1 ]] || return 0
  printf -- '--- last lines of %s ---\n' "$1" >&2
  # At most 4 KB: a log without newlines would otherwise be printed whole.
  tail -n 30 "$1" | tail -c 4096 >&2 || true
}

# ---------------------------------------------------------------------------------------------
# TLS material and secrets (.stack/tls)
#
#   ca.pem, ca-key.pem                     throwaway CA that signs the server certificate
#   server.pem, server-key.pem             server certificate for 127.0.0.1 and localhost (SAN)
#   server-keystore.pem                    key + chain: the PEM keystore Kafka reads
#   untrusted-ca.pem, untrusted-ca-key.pem a second CA that signed nothing we serve: a client
#                                          trusting only it must refuse our servers
#   kafka-password                         SCRAM-SHA-512 password of Kafka user postline (random)
# Keys and the password are mode 600. Generated once and reused; every certificate is issued
# again when one is missing or expires within 7 days (the password is kept).

# tls_valid FILE: FILE is a certificate valid for at least TLS_MIN_VALID more seconds.
tls_valid() {
  [[ -s $1 ]] && openssl x509 -noout -checkend "$TLS_MIN_VALID" -in "$1" >/dev/null 2>&1
}

# tls_ca DIR NAME CN: a self-signed CA in DIR/NAME.pem and DIR/NAME-key.pem.
tls_ca() {
  openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 825 \
    -keyout "$1/$2-key.pem" -out "$1/$2.pem" -subj "/O=postline local stack/CN=$3" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    >>"$LOGS/tls.log" 2>&1
}

tls_generate() {
  local tmp="$TLS/tmp.$$" f
  [[ -n $TLS ]] || die "tls: TLS is empty"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  chmod 700 "$tmp"
  tls_ca "$tmp" ca "postline test CA" || { tail_log "$LOGS/tls.log"; die "tls: creating the CA failed"; }
  tls_ca "$tmp" untrusted-ca "postline UNTRUSTED test CA" ||
    { tail_log "$LOGS/tls.log"; die "tls: creating the untrusted CA failed"; }
  printf '%s\n' 'basicConstraints = critical, CA:FALSE' \
    'keyUsage = critical, digitalSignature, keyEncipherment' \
    'extendedKeyUsage = serverAuth' \
    'subjectAltName = IP:127.0.0.1, DNS:localhost' >"$tmp/server.ext"
  {
    openssl req -new -newkey rsa:2048 -nodes -sha256 -keyout "$tmp/server-key.pem" \
      -out "$tmp/server.csr" -subj "/O=postline local stack/CN=127.0.0.1" &&
      openssl x509 -req -sha256 -days 397 -in "$tmp/server.csr" -CA "$tmp/ca.pem" \
        -CAkey "$tmp/ca-key.pem" -CAcreateserial -extfile "$tmp/server.ext" -out "$tmp/server.pem" &&
      openssl verify -CAfile "$tmp/ca.pem" "$tmp/server.pem"
  } >>"$LOGS/tls.log" 2>&1 || { tail_log "$LOGS/tls.log"; die "tls: issuing the server certificate failed"; }
  cat "$tmp/server-key.pem" "$tmp/server.pem" "$tmp/ca.pem" >"$tmp/server-keystore.pem"
  chmod 600 "$tmp"/*-key.pem "$tmp/server-keystore.pem"
  chmod 644 "$tmp/ca.pem" "$tmp/untrusted-ca.pem" "$tmp/server.pem"
  # server.pem last: tls_ensure checks it, so an interrupted move is redone next time.
  for f in ca-key.pem ca.pem untrusted-ca-key.pem untrusted-ca.pem server-key.pem server-keystore.pem server.pem; do
    mv -f "$tmp/$f" "$TLS/$f"
  done
  rm -rf "$tmp"
}

# tls_ensure: the CAs, the server certificate and the SCRAM password exist and are fresh. Cheap
# (three `openssl x509 -checkend`) when they are.
tls_ensure() {
  mkdir -p "$TLS"
  chmod 700 "$TLS"
  command -v openssl >/dev/null || die "tls: openssl not found (apt-get install -y openssl)"
  if [[ ! -s $TLS/kafka-password ]]; then
    (umask 077 && openssl rand -hex 24 >"$TLS/kafka-password.tmp") || die "tls: generating the Kafka password failed"
    mv -f "$TLS/kafka-password.tmp" "$TLS/kafka-password"
  fi
  chmod 600 "$TLS/kafka-password"
  if [[ -s $TLS/server-key.pem && -s $TLS/server-keystore.pem ]] && tls_valid "$TLS/ca.pem" &&
    tls_valid "$TLS/untrusted-ca.pem" && tls_valid "$TLS/server.pem"; then
    return 0
  fi
  log "tls: issuing a throwaway CA and server certificate into $TLS"
  tls_generate
}

# tls_stamp: a line that changes whenever the server certificate does, written into the Kafka and
# Postgres configs so that a new certificate counts as a config change.
tls_stamp() {
  printf 'server.pem sha256 %s' "$(sha256sum <"$TLS/server.pem" | cut -c1-64)"
}

# tls_handshake HOST:PORT [STARTTLS]: a TLS handshake there verifies against our CA for 127.0.0.1.
tls_handshake() {
  [[ -s $TLS/ca.pem ]] || return 1
  local starttls=()
  [[ -n ${2:-} ]] && starttls=(-starttls "$2")
  timeout 5 openssl s_client -connect "$1" "${starttls[@]}" -CAfile "$TLS/ca.pem" \
    -verify_return_error -verify_ip 127.0.0.1 -brief </dev/null >/dev/null 2>&1
}

kafka_password() {
  tr -d '\n' <"$TLS/kafka-password"
}

# ---------------------------------------------------------------------------------------------
# Kafka

# kafka_answers: the broker answers a real ApiVersions (v0) request with error code 0. Speaks the
# Kafka protocol from bash so that `status` and an already-running `up` stay fast.
# kafka_answers [PORT]: the same for another port of KAFKA_HOST (a cluster node's).
kafka_answers() {
  local reply port=${1:-$KAFKA_PORT}
  reply="$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/$KAFKA_HOST/$port" || exit 1
    # size=18, api_key=18 (ApiVersions), api_version=0, correlation_id=7, client_id="postline"
    printf '\x00\x00\x00\x12\x00\x12\x00\x00\x00\x00\x00\x07\x00\x08postline' >&3
    timeout 3 head -c 10 <&3 | od -An -v -tx1 | tr -d ' \n'
  )" || return 1
  # bytes 0-3 size, 4-7 correlation id, 8-9 error code
  [[ ${reply:8:12} == 000000070000 ]]
}

kafka_fetch() {
  [[ -n $KAFKA_VERSION ]] || die "cannot read <kafka.version> from $KAFKA_POM"
  if [[ -d $KAFKA_LIBS ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "kafka: mvn not found (apt-get install -y maven)"
  command -v java >/dev/null || die "kafka: java not found (Kafka $KAFKA_VERSION needs Java 17+)"
  log "kafka: fetching $KAFKA_VERSION jars from Maven Central into $KAFKA_LIBS"
  local tmp="$KAFKA_LIBS.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$KAFKA_LIBS")"
  (cd "$ROOT/deploy/kafka" && mvn -q -B dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp") >"$LOGS/kafka-fetch.log" 2>&1 ||
    { tail_log "$LOGS/kafka-fetch.log"; rm -rf "$tmp"; die "kafka: mvn dependency:copy-dependencies failed"; }
  mv "$tmp" "$KAFKA_LIBS" # atomic: a half-filled folder never looks complete
}

kafka_java() {
  java -cp "$KAFKA_LIBS/*" -Dlog4j2.configurationFile="$ROOT/deploy/kafka/log4j2.properties" "$@"
}

# kafka_render: server.properties as this checkout wants it (template + paths + certificate stamp).
kafka_render() {
  sed -e "s:@DATA_DIR@:$KAFKA_DATA:g" -e "s:@TLS_DIR@:$TLS:g" -e "s:@TLS_STAMP@:$(tls_stamp):g" \
    "$ROOT/deploy/kafka/server.properties.tmpl"
}

# kafka_scram_key: names the SCRAM credential the cluster should hold (cluster id, user, password),
# so a reformatted data dir or a new password file counts as "not applied yet".
kafka_scram_key() {
  {
    sed -n 's/^cluster\.id=//p' "$KAFKA_DATA/meta.properties" 2>/dev/null
    printf '%s\n%s\n' "$KAFKA_SASL_USER" "$(kafka_password)"
  } | sha256sum | cut -c1-64
}

# kafka_start: start the broker if needed, without waiting for it (see kafka_wait). A broker that
# runs with another server.properties than the one rendered now (say, one started before the
# SASL_SSL listener existed, or before the certificate was reissued) is restarted once.
kafka_start() {
  KAFKA_STARTED=0
  mkdir -p "$STACK/kafka" "$KAFKA_DATA"
  local props="$STACK/kafka/server.properties" new="$STACK/kafka/server.properties.new"
  kafka_render >"$new"
  if pid_alive "$KAFKA_PID" kafka.Kafka; then
    if cmp -s "$new" "$props"; then
      rm -f "$new"
      return 0
    fi
    log "kafka: the running broker's $props is not what deploy/kafka/server.properties.tmpl renders now; restarting it once"
    kafka_down
  fi
  if port_open "$KAFKA_HOST" "$KAFKA_PORT" || port_open "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT" ||
    port_open "$KAFKA_HOST" "$KAFKA_SECURE_PORT"; then
    die "kafka: something else listens on $KAFKA_HOST:$KAFKA_PORT, :$KAFKA_CONTROLLER_PORT or :$KAFKA_SECURE_PORT; stop it first"
  fi
  kafka_fetch
  mv -f "$new" "$props"
  if [[ ! -f $KAFKA_DATA/meta.properties ]]; then
    log "kafka: formatting storage in $KAFKA_DATA (with SCRAM-SHA-512 user $KAFKA_SASL_USER)"
    local id
    id="$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$LOGS/kafka.log" | tail -n1)"
    kafka_java kafka.tools.StorageTool format --standalone -t "$id" -c "$props" \
      --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$(kafka_password)]" \
      >>"$LOGS/kafka.log" 2>&1 || { tail_log "$LOGS/kafka.log"; die "kafka: storage format failed"; }
    kafka_scram_key >"$STACK/kafka/scram-applied"
  fi
  log "kafka: starting $KAFKA_VERSION"
  spawn "$KAFKA_PID" "$LOGS/kafka.log" \
    java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/deploy/kafka/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$props"
  KAFKA_STARTED=1
}

# kafka_scram_ensure: a data dir formatted without the SCRAM user (or with another password) gets
# it through the admin API over PLAINTEXT. Idempotent (it sets the credential); skipped, at no
# cost, once the marker says this cluster id, user and password were applied.
kafka_scram_ensure() {
  local key marker="$STACK/kafka/scram-applied"
  key="$(kafka_scram_key)"
  [[ -f $marker && "$(<"$marker")" == "$key" ]] && return 0
  log "kafka: setting the SCRAM-SHA-512 credential of user $KAFKA_SASL_USER"
  kafka_java kafka.admin.ConfigCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_PORT" --alter \
    --entity-type users --entity-name "$KAFKA_SASL_USER" \
    --add-config "SCRAM-SHA-512=[password=$(kafka_password)]" >>"$LOGS/kafka-scram.log" 2>&1 ||
    { tail_log "$LOGS/kafka-scram.log"; die "kafka: creating SCRAM user $KAFKA_SASL_USER failed"; }
  printf '%s\n' "$key" >"$marker"
}

# kafka_wait: poll with ApiVersions until the broker serves requests; after a fresh start also
# list topics through the admin client (Metadata round trip) before calling it ready.
kafka_wait() {
  local deadline=$((SECONDS + KAFKA_TIMEOUT))
  until kafka_answers && port_open "$KAFKA_HOST" "$KAFKA_SECURE_PORT"; do
    if ! spawned_alive "$KAFKA_PID"; then
      tail_log "$LOGS/kafka.log"
      die "kafka: the broker exited; see $LOGS/kafka.log"
    fi
    ((SECONDS < deadline)) || { tail_log "$LOGS/kafka.log"; die "kafka: not ready after ${KAFKA_TIMEOUT}s"; }
    sleep 0.2
  done
  if [[ ${KAFKA_STARTED:-0} == 1 ]]; then
    until kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_PORT" \
      --list >/dev/null 2>>"$LOGS/kafka-ready.log"; do
      ((SECONDS < deadline)) || { tail_log "$LOGS/kafka-ready.log"; die "kafka: metadata not served after ${KAFKA_TIMEOUT}s"; }
      sleep 0.5
    done
  fi
  kafka_scram_ensure
  local note=""
  [[ ${KAFKA_STARTED:-0} == 1 ]] || note=" (already running)"
  log "kafka: ready on $KAFKA_HOST:$KAFKA_PORT (PLAINTEXT) and $KAFKA_HOST:$KAFKA_SECURE_PORT (SASL_SSL, SCRAM-SHA-512 user $KAFKA_SASL_USER) ($KAFKA_VERSION)$note"
}

kafka_down() {
  stop_pid kafka "$KAFKA_PID" kafka.Kafka
}

# ---------------------------------------------------------------------------------------------
# Kafka cluster: three KRaft nodes, each broker and controller, for broker-failure tests. Same
# jars as the single node (kafka_fetch); it shares nothing else with it but the log4j config.

cluster_port() { printf '%d' $((19092 + ($1 - 1) * 100)); }
cluster_controller_port() { printf '%d' $((19093 + ($1 - 1) * 100)); }
cluster_pid() { printf '%s' "$STACK/cluster-$1.pid"; }
cluster_log() { printf '%s' "$LOGS/cluster-$1.log"; }

# cluster_brokers: the bootstrap list, comma-separated.
cluster_brokers() {
  local n out=()
  for n in "${CLUSTER_NODES[@]}"; do out+=("$KAFKA_HOST:$(cluster_port "$n")"); done
  (IFS=, && printf '%s' "${out[*]}")
}

# cluster_voters: the static controller quorum, id@host:port for every node.
cluster_voters() {
  local n out=()
  for n in "${CLUSTER_NODES[@]}"; do out+=("$n@$KAFKA_HOST:$(cluster_controller_port "$n")"); done
  (IFS=, && printf '%s' "${out[*]}")
}

# cluster_check_node N: N names a node of the cluster.
cluster_check_node() {
  if [[ ${1:-} =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= ${#CLUSTER_NODES[@]})); then
    return 0
  fi
  die "cluster: no node '${1:-}' (nodes are ${CLUSTER_NODES[*]})"
}

# cluster_render N: server.properties of node N. Rendered here, not from a template beside
# deploy/kafka/server.properties.tmpl: nearly every line differs in intent, since this cluster
# exists to lose a broker.
cluster_render() {
  local n=$1
  cat <<EOF
# Written by scripts/stack.sh (cluster_render): change the script, not this file.
# Node $n of the three-node KRaft cluster for broker-failure tests.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$(cluster_voters)
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://$KAFKA_HOST:$(cluster_port "$n"),CONTROLLER://$KAFKA_HOST:$(cluster_controller_port "$n")
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$(cluster_port "$n")
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$CLUSTER_DIR/$n/data

# A write acknowledged to RequireAll is on two brokers at least, so losing any one loses
# nothing; a replica that fell behind never becomes leader.
auto.create.topics.enable=false
delete.topic.enable=true
num.partitions=6
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
message.max.bytes=4194304
replica.fetch.max.bytes=4194304
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2

# A killed broker is fenced 4 s after its last heartbeat (default 9 s) and its partitions get
# new leaders then: a failure test sees the move within its run.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000

# Tests create many short-lived groups (see server.properties.tmpl).
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000

# Three JVMs on a small machine: few threads, scratch data.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
background.threads=2
log.retention.hours=24
log.segment.bytes=67108864
EOF
}

# cluster_id: the cluster's id, made once (every node is formatted with it).
cluster_id() {
  local f="$CLUSTER_DIR/cluster.id"
  if [[ ! -s $f ]]; then
    kafka_java kafka.tools.StorageTool random-uuid 2>>"$LOGS/cluster-format.log" | tail -n1 >"$f.tmp"
    [[ -s $f.tmp ]] || { tail_log "$LOGS/cluster-format.log"; die "cluster: kafka-storage random-uuid failed"; }
    mv -f "$f.tmp" "$f"
  fi
  cat "$f"
}

# cluster_format N ID: format node N's storage for cluster ID (static voters: no --standalone).
cluster_format() {
  kafka_java kafka.tools.StorageTool format -t "$2" -c "$CLUSTER_DIR/$1/server.properties" \
    >>"$(cluster_log "$1")" 2>&1
}

# cluster_spawn N: start node N's JVM, without waiting for it. The client compiler only and the
# serial collector: a restart mid-test boots in seconds on a busy two-core machine, where C2's
# compiler threads and G1's workers fight the tests for CPU; throughput is ample for tests.
cluster_spawn() {
  spawn "$(cluster_pid "$1")" "$(cluster_log "$1")" \
    java -Xms128m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/deploy/kafka/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$CLUSTER_DIR/$1/server.properties"
}

# cluster_start [N...]: start the named nodes (default all) that do not run, or that run with
# another config than the one rendered now (those are stopped first), without waiting for them
# (see cluster_wait). Unformatted nodes are formatted first, in parallel (a JVM each). Sets
# CLUSTER_STARTED to the nodes it started.
cluster_start() {
  local nodes=("$@") n new props need_format=() pids=() id i
  ((${#nodes[@]})) || nodes=("${CLUSTER_NODES[@]}")
  CLUSTER_STARTED=()
  mkdir -p "$CLUSTER_DIR"
  for n in "${nodes[@]}"; do
    mkdir -p "$CLUSTER_DIR/$n/data"
    props="$CLUSTER_DIR/$n/server.properties"
    new="$props.new"
    cluster_render "$n" >"$new"
    if pid_alive "$(cluster_pid "$n")" kafka.Kafka; then
      if cmp -s "$new" "$props"; then
        rm -f "$new"
        continue
      fi
      log "cluster: node $n runs with another $props than the script renders now; restarting it"
      stop_pid "cluster: node $n" "$(cluster_pid "$n")" kafka.Kafka
    fi
    if port_open "$KAFKA_HOST" "$(cluster_port "$n")" || port_open "$KAFKA_HOST" "$(cluster_controller_port "$n")"; then
      rm -f "$new"
      die "cluster: something else listens on $KAFKA_HOST:$(cluster_port "$n") or :$(cluster_controller_port "$n"); stop it first"
    fi
    mv -f "$new" "$props"
    [[ -f $CLUSTER_DIR/$n/data/meta.properties ]] || need_format+=("$n")
    CLUSTER_STARTED+=("$n")
  done
  ((${#CLUSTER_STARTED[@]})) || return 0
  kafka_fetch
  if ((${#need_format[@]})); then
    id="$(cluster_id)"
    log "cluster: formatting the storage of node(s) ${need_format[*]} (cluster id $id)"
    for n in "${need_format[@]}"; do
      cluster_format "$n" "$id" 6>&- 7>&- 8>&- &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" ||
        { tail_log "$(cluster_log "${need_format[$i]}")"; die "cluster: storage format of node ${need_format[$i]} failed"; }
    done
  fi
  log "cluster: starting node(s) ${CLUSTER_STARTED[*]} ($KAFKA_VERSION)"
  for n in "${CLUSTER_STARTED[@]}"; do cluster_spawn "$n"; done
}

# cluster_wait [N...]: wait until the named nodes (default all) answer ApiVersions on their
# PLAINTEXT listener. A KRaft broker enables request processing only once the controller quorum
# has unfenced it, so an answer means the node has joined. A line every 10 s meanwhile.
cluster_wait() {
  local nodes=("$@") n pending deadline=$((SECONDS + CLUSTER_TIMEOUT)) start=$SECONDS next=$((SECONDS + 10))
  ((${#nodes[@]})) || nodes=("${CLUSTER_NODES[@]}")
  while :; do
    pending=()
    for n in "${nodes[@]}"; do
      kafka_answers "$(cluster_port "$n")" && continue
      spawned_alive "$(cluster_pid "$n")" ||
        { tail_log "$(cluster_log "$n")"; die "cluster: node $n exited; see $(cluster_log "$n")"; }
      pending+=("$n")
    done
    ((${#pending[@]})) || break
    ((SECONDS < deadline)) ||
      { tail_log "$(cluster_log "${pending[0]}")"; die "cluster: node(s) ${pending[*]} not ready after ${CLUSTER_TIMEOUT}s"; }
    if ((SECONDS >= next)); then
      log "cluster: waiting for node(s) ${pending[*]} ($((SECONDS - start)) s)"
      next=$((next + 10))
    fi
    sleep 0.2
  done
  local note=""
  ((${#CLUSTER_STARTED[@]})) || note=" (already running)"
  log "cluster: ready on $(cluster_brokers) (node(s) ${nodes[*]}; replication 3, min.insync.replicas 2, $KAFKA_VERSION)$note"
}

# cluster_down: SIGTERM to every node at once, so they shut down together rather than each
# waiting in turn for a quorum that is leaving; SIGKILL what still runs after 30 s.
cluster_down() {
  local n i
  local -A stopping=()
  for n in "${CLUSTER_NODES[@]}"; do
    if pid_alive "$(cluster_pid "$n")" kafka.Kafka; then
      stopping[$n]="$(<"$(cluster_pid "$n")")"
      log "cluster: node $n: stopping (pid ${stopping[$n]})"
      kill -TERM "${stopping[$n]}" 2>/dev/null || true
    else
      log "cluster: node $n: not running"
      rm -f "$(cluster_pid "$n")"
    fi
  done
  for n in "${!stopping[@]}"; do
    for ((i = 0; i < 300; i++)); do
      [[ -d /proc/${stopping[$n]} ]] || break
      sleep 0.1
    done
    if [[ -d /proc/${stopping[$n]} ]]; then
      log "cluster: node $n did not stop in 30 s; killing"
      kill -KILL "${stopping[$n]}" 2>/dev/null || true
    fi
    rm -f "$(cluster_pid "$n")"
    log "cluster: node $n: stopped"
  done
}

# cluster_kill N: SIGKILL node N and wait until it is gone: a crash, no controlled shutdown.
cluster_kill() {
  local n=$1 pid i
  if ! pid_alive "$(cluster_pid "$n")" kafka.Kafka; then
    log "cluster: node $n is not running"
    return 0
  fi
  pid="$(<"$(cluster_pid "$n")")"
  kill -KILL "$pid"
  for ((i = 0; i < 100; i++)); do
    [[ -d /proc/$pid ]] || break
    sleep 0.05
  done
  [[ -d /proc/$pid ]] && die "cluster: node $n (pid $pid) still runs 5 s after SIGKILL"
  rm -f "$(cluster_pid "$n")"
  log "cluster: node $n killed (pid $pid)"
}

cluster_status() {
  local n rc=0
  for n in "${CLUSTER_NODES[@]}"; do
    if kafka_answers "$(cluster_port "$n")"; then
      log "cluster: node $n up on $KAFKA_HOST:$(cluster_port "$n") (controller :$(cluster_controller_port "$n"))"
    else
      log "cluster: node $n down ($KAFKA_HOST:$(cluster_port "$n"))"
      rc=1
    fi
  done
  return "$rc"
}

cmd_cluster() {
  local sub=${1:-up}
  [[ $# -gt 0 ]] && shift
  mkdir -p "$STACK" "$LOGS" "$CLUSTER_DIR"
  case $sub in
  up | start | kill)
    # Its own lock, not up.lock: a test restarting a broker must not wait behind another `up`;
    # two cluster commands at once take turns. Fd 6 is closed in every process spawn starts.
    exec 6>"$STACK/cluster.lock"
    flock 6
    ;;
  esac
  case $sub in
  up)
    cluster_start
    cluster_wait
    ;;
  down) cluster_down ;;
  status) cluster_status ;;
  env) printf 'export POSTLINE_TEST_KAFKA_CLUSTER=%s\n' "$(cluster_brokers)" ;;
  kill)
    cluster_check_node "${1:-}"
    cluster_kill "$1"
    ;;
  start)
    cluster_check_node "${1:-}"
    cluster_start "$1"
    cluster_wait "$1"
    ;;
  *) die "cluster: unknown command $sub (up, down, status, env, kill N, start N)" ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

# pg_bin_dir: set PG_BIN to the bin folder of the newest installed PostgreSQL major version.
pg_bin_dir() {
  local d
  PG_BIN=""
  while IFS= read -r d; do
    [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] && PG_BIN="$d"
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
  [[ -n $PG_BIN ]]
}

pg_install() {
  pg_bin_dir && return 0
  log "postgres: installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  # We run our own cluster: do not let the package create (and start) Debian's 'main' on 5432.
  mkdir -p /etc/postgresql-common/createcluster.d
  printf 'create_main_cluster = false\n' >/etc/postgresql-common/createcluster.d/postline.conf
  apt-get update -qq >"$LOGS/apt.log" 2>&1 || { tail_log "$LOGS/apt.log"; die "postgres: apt-get update failed"; }
  apt-get install -y -qq postgresql >>"$LOGS/apt.log" 2>&1 ||
    { tail_log "$LOGS/apt.log"; die "postgres: apt-get install postgresql failed"; }
  pg_bin_dir || die "postgres: no initdb/pg_ctl under /usr/lib/postgresql/*/bin after install"
}

# pg_paths: pick the data directory (see the header) and the log file.
pg_paths() {
  id postgres >/dev/null 2>&1 || die "postgres: no 'postgres' OS user (is the postgresql package installed?)"
  if [[ -f $STACK/pg-location ]]; then
    PGDATA="$(<"$STACK/pg-location")"
  elif as_postgres test -x "$STACK"; then
    PGDATA="$STACK/pg"
  else
    PGDATA="/var/tmp/postline-pg-$HASH/data"
  fi
  if [[ $PGDATA == "$STACK/pg" ]]; then
    PG_LOG="$LOGS/postgres.log"
  else
    PG_LOG="$(dirname "$PGDATA")/postgres.log"
  fi
}

# as_postgres CMD...: run CMD as the postgres OS user from / (the repo may be unreadable to it).
as_postgres() {
  (cd / && runuser -u postgres -- "$@" 7>&- 8>&-)
}

pg_ctl_() {
  as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA" "$@"
}

pg_running() {
  [[ -f $PGDATA/PG_VERSION ]] && pg_ctl_ status >/dev/null 2>&1
}

pg_answers() {
  pg_isready -q -h 127.0.0.1 -p "$PG_PORT" -t 2 >/dev/null 2>&1
}

# pg_psql: run the SQL on stdin as the superuser over our unix socket.
pg_psql() {
  as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PG_PORT" \
    -U postgres -d postgres
}

# pg_query SQL: one query as the superuser over our unix socket; unaligned, tuples only.
pg_query() {
  as_postgres "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PG_PORT" \
    -U postgres -d postgres -c "$1"
}

# pg_durability: "on" unless POSTLINE_PG_FAST=1 asks for the benchmark setting (see the header).
pg_durability() {
  if [[ ${POSTLINE_PG_FAST:-0} == 1 ]]; then printf off; else printf on; fi
}

# pg_conf: postline.conf as this run wants it. The certificate paths are relative to PGDATA.
pg_conf() {
  local d
  d="$(pg_durability)"
  cat <<EOF
# Written by scripts/stack.sh on every \`up\`: change the script, not this file.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCK'
max_connections = 300
# The idempotency table's hot pages and its Message-ID index, which every claim and outcome
# touches at random, must stay in PostgreSQL's own buffers as the table grows (see the header).
shared_buffers = ${POSTLINE_PG_SHARED_BUFFERS:-1GB}
# Checkpoints on the clock, not on WAL volume: after each checkpoint the first change to every page
# writes the whole page to WAL, and with the 1 GB default a full-rate worker forced one every 30-50 s,
# each costing more as the Message-ID index grew (see the header).
max_wal_size = ${POSTLINE_PG_MAX_WAL_SIZE:-8GB}
checkpoint_timeout = 15min
# The retention purge deletes rows as fast as mail is sent; autovacuum must look often enough to
# reclaim them while they are few (the tables' own thresholds are in migration 0014).
autovacuum_naptime = 5s
# TLS with the throwaway CA of .stack/tls ($(tls_stamp)).
ssl = on
ssl_cert_file = 'postline-server.pem'
ssl_key_file = 'postline-server-key.pem'
# Durable unless POSTLINE_PG_FAST=1 (benchmarks: a crash of the machine may lose or corrupt data).
fsync = $d
synchronous_commit = $d
full_page_writes = $d
EOF
}

# pg_restart_keys FILE: the settings of FILE that only a restart applies (the rest reload).
pg_restart_keys() {
  grep -E '^(listen_addresses|port|unix_socket_directories|max_connections|shared_buffers) ' "$1" 2>/dev/null || true
}

# pg_configure: write postline.conf and the server certificate into PGDATA (owned by postgres,
# mode 600, as PostgreSQL demands of the key). Sets PG_CHANGED=1 when anything differs from what
# is there, and PG_NEEDS_RESTART=1 when a setting that only a restart applies changed.
pg_configure() {
  local conf="$PGDATA/postline.conf" f
  PG_CHANGED=0
  PG_NEEDS_RESTART=0
  pg_conf >"$conf.new"
  if ! cmp -s "$conf.new" "$conf"; then
    PG_CHANGED=1
    [[ "$(pg_restart_keys "$conf.new")" == "$(pg_restart_keys "$conf")" ]] || PG_NEEDS_RESTART=1
  fi
  for f in server.pem server-key.pem; do
    if ! cmp -s "$TLS/$f" "$PGDATA/postline-$f"; then
      install -o postgres -g postgres -m 600 "$TLS/$f" "$PGDATA/postline-$f.new"
      mv -f "$PGDATA/postline-$f.new" "$PGDATA/postline-$f"
      PG_CHANGED=1
    fi
  done
  chown postgres:postgres "$conf.new"
  chmod 600 "$conf.new"
  mv -f "$conf.new" "$conf"
}

# pg_check_settings: the running server uses what postline.conf says (after a reload the
# postmaster applies it asynchronously, hence the short poll).
pg_check_settings() {
  local want got deadline=$((SECONDS + 10))
  want="on $(pg_durability) $(pg_durability)"
  while :; do
    got="$(pg_query "SELECT current_setting('ssl') || ' ' || current_setting('fsync') || ' ' || current_setting('synchronous_commit')" 2>/dev/null)" || got=""
    [[ $got == "$want" ]] && return 0
    ((SECONDS < deadline)) || { tail_log "$PG_LOG"; die "postgres: ssl/fsync/synchronous_commit are '$got', not '$want' after applying postline.conf"; }
    sleep 0.2
  done
}

pg_up() {
  pg_install
  pg_paths
  if pg_running; then
    pg_answers || die "postgres: our cluster in $PGDATA runs but 127.0.0.1:$PG_PORT does not answer (another port? see $PG_LOG)"
    pg_configure
    if ((PG_NEEDS_RESTART)); then
      log "postgres: postline.conf changed a setting that needs a restart; restarting once"
      pg_ctl_ -m fast -l "$PG_LOG" -w -t 60 restart >/dev/null || { tail_log "$PG_LOG"; die "postgres: pg_ctl restart failed"; }
      pg_wait
    elif ((PG_CHANGED)); then
      # ssl, its files, fsync, synchronous_commit and full_page_writes apply on reload: open
      # connections of tests running now are kept.
      log "postgres: postline.conf or its certificate changed; reloading"
      pg_ctl_ reload >/dev/null || { tail_log "$PG_LOG"; die "postgres: pg_ctl reload failed"; }
    fi
    ((PG_CHANGED)) && pg_check_settings
    pg_roles
    log "postgres: ready on 127.0.0.1:$PG_PORT (TLS, durability $(pg_durability)) (already running)"
    return 0
  fi
  if port_open 127.0.0.1 "$PG_PORT"; then
    die "postgres: something else listens on 127.0.0.1:$PG_PORT (Debian's 'main' cluster? pg_lsclusters / pg_ctlcluster stop); stop it or set POSTLINE_PG_PORT"
  fi
  mkdir -p "$(dirname "$PGDATA")" "$PG_SOCK"
  chown postgres:postgres "$PG_SOCK"
  if [[ $PGDATA != "$STACK/pg" ]]; then
    chown postgres:postgres "$(dirname "$PGDATA")"
    ln -sfn "$PG_LOG" "$LOGS/postgres.log"
  fi
  touch "$PG_LOG"
  chown postgres:postgres "$PG_LOG"
  if [[ ! -f $PGDATA/PG_VERSION ]]; then
    log "postgres: initdb in $PGDATA ($(basename "$(dirname "$PG_BIN")"))"
    rm -rf "$PGDATA"
    install -d -o postgres -g postgres -m 700 "$PGDATA"
    as_postgres "$PG_BIN/initdb" -D "$PGDATA" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=scram-sha-256 >>"$PG_LOG" 2>&1 ||
      { tail_log "$PG_LOG"; die "postgres: initdb failed"; }
    printf "\ninclude_if_exists = 'postline.conf'\n" >>"$PGDATA/postgresql.conf"
    printf '%s\n' "$PGDATA" >"$STACK/pg-location"
  fi
  # Rewritten on every `up` so POSTLINE_PG_PORT, POSTLINE_PG_FAST and a new certificate apply
  # to an existing cluster.
  pg_configure
  log "postgres: starting on 127.0.0.1:$PG_PORT"
  pg_ctl_ -l "$PG_LOG" -w -t 60 start >/dev/null || { tail_log "$PG_LOG"; die "postgres: pg_ctl start failed"; }
  pg_wait
  pg_roles
  log "postgres: ready on 127.0.0.1:$PG_PORT (role/db postline, TLS, durability $(pg_durability))"
}

# pg_roles: the role and database postline, made if missing. postline may run CHECKPOINT
# (pg_checkpoint): the soak starts each measured run from one, so that no checkpoint that the
# previous run's WAL brought on falls inside its windows.
pg_roles() {
  pg_psql <<'SQL' >/dev/null || die "postgres: creating role/database postline failed"
SELECT 'CREATE ROLE postline LOGIN CREATEDB PASSWORD ''postline'''
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'postline')
\gexec
SELECT 'CREATE DATABASE postline OWNER postline'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'postline')
\gexec
SELECT 'GRANT pg_checkpoint TO postline'
WHERE NOT pg_has_role('postline', 'pg_checkpoint', 'member')
\gexec
SQL
}

pg_wait() {
  local deadline=$((SECONDS + 60))
  until pg_answers; do
    ((SECONDS < deadline)) || { tail_log "$PG_LOG"; die "postgres: not ready after 60 s"; }
    sleep 0.2
  done
}

pg_down() {
  pg_bin_dir || { log "postgres: not installed"; return 0; }
  pg_paths
  if pg_running; then
    log "postgres: stopping"
    pg_ctl_ -m fast -w -t 60 stop >/dev/null
    log "postgres: stopped"
  else
    log "postgres: not running"
  fi
}

# ---------------------------------------------------------------------------------------------
# Mailpit

mailpit_answers() {
  smtp_banner "$MAILPIT_SMTP_PORT" &&
    curl -sf -m 3 -o /dev/null "http://127.0.0.1:$MAILPIT_HTTP_PORT/api/v1/info"
}

mailpit_install() {
  [[ -x $MAILPIT_BIN ]] && return 0
  command -v go >/dev/null || die "mailpit: go not found"
  log "mailpit: building mailpit $MAILPIT_VERSION with go install, about 2 minutes the first time (into $(dirname "$MAILPIT_BIN"), log $LOGS/mailpit-build.log)"
  mkdir -p "$(dirname "$MAILPIT_BIN")"
  (cd / && GOBIN="$(dirname "$MAILPIT_BIN")" exec go install "github.com/axllent/mailpit@$MAILPIT_VERSION") \
    >"$LOGS/mailpit-build.log" 2>&1 7>&- 8>&- &
  # A line every 10 s, so a first `up` does not look hung.
  local pid=$! start=$SECONDS rc=0 next=$((SECONDS + 10))
  while child_running "$pid"; do
    if ((SECONDS >= next)); then
      log "mailpit: still building ($((SECONDS - start)) s)"
      next=$((next + 10))
    fi
    sleep 0.5
  done
  wait "$pid" || rc=$?
  ((rc == 0)) || { tail_log "$LOGS/mailpit-build.log"; die "mailpit: go install failed (exit $rc)"; }
  log "mailpit: built in $((SECONDS - start)) s"
}

mailpit_start() {
  MAILPIT_STARTED=0
  if pid_alive "$MAILPIT_PID" mailpit; then
    return 0
  fi
  if port_open 127.0.0.1 "$MAILPIT_SMTP_PORT" || port_open 127.0.0.1 "$MAILPIT_HTTP_PORT"; then
    die "mailpit: something else listens on 127.0.0.1:$MAILPIT_SMTP_PORT or :$MAILPIT_HTTP_PORT; stop it first"
  fi
  mailpit_install
  mkdir -p "$STACK/mailpit"
  log "mailpit: starting"
  spawn "$MAILPIT_PID" "$LOGS/mailpit.log" \
    "$MAILPIT_BIN" --disable-version-check \
    --smtp "127.0.0.1:$MAILPIT_SMTP_PORT" --listen "127.0.0.1:$MAILPIT_HTTP_PORT" \
    --smtp-auth-accept-any --smtp-auth-allow-insecure \
    --max 0 --database "$STACK/mailpit/mailpit.db"
  MAILPIT_STARTED=1
}

mailpit_wait() {
  local deadline=$((SECONDS + 60))
  until mailpit_answers; do
    if ! spawned_alive "$MAILPIT_PID"; then
      tail_log "$LOGS/mailpit.log"
      die "mailpit: exited; see $LOGS/mailpit.log"
    fi
    ((SECONDS < deadline)) || { tail_log "$LOGS/mailpit.log"; die "mailpit: not ready after 60 s"; }
    sleep 0.1
  done
  local note=""
  [[ ${MAILPIT_STARTED:-0} == 1 ]] || note=" (already running)"
  log "mailpit: ready, SMTP 127.0.0.1:$MAILPIT_SMTP_PORT, API http://127.0.0.1:$MAILPIT_HTTP_PORT$note"
}

mailpit_down() {
  stop_pid mailpit "$MAILPIT_PID" mailpit
}

# ---------------------------------------------------------------------------------------------
# Postfix smtp-sink / smtp-source (benchmarks)

# deb_fetch PACKAGE DIR: set DEB to a .deb of Debian's PACKAGE, from DIR or apt's cache, else
# downloaded into DIR with `apt-get download` (after `apt-get update` if the lists are stale).
deb_fetch() {
  local pkg=$1 dir=$2 debs
  DEB=""
  shopt -s nullglob
  debs=("$dir/${pkg}"_*.deb "/var/cache/apt/archives/${pkg}"_*.deb)
  ((${#debs[@]})) && DEB="${debs[0]}"
  if [[ -z $DEB ]]; then
    (cd "$dir" && apt-get download "$pkg") >"$LOGS/$pkg-download.log" 2>&1 || {
      apt-get update -qq >>"$LOGS/$pkg-download.log" 2>&1 || true
      (cd "$dir" && apt-get download "$pkg") >>"$LOGS/$pkg-download.log" 2>&1 ||
        { tail_log "$LOGS/$pkg-download.log"; die "$pkg: apt-get download $pkg failed"; }
    }
    debs=("$dir/${pkg}"_*.deb)
    ((${#debs[@]})) || die "$pkg: apt-get download left no ${pkg}_*.deb in $dir"
    DEB="${debs[0]}"
  fi
  shopt -u nullglob
}

# deb_extract PACKAGE DIR FILE: unless DIR/root/FILE exists, unpack Debian's PACKAGE into DIR/root
# without installing it, so no maintainer script runs and no service of the package starts. The
# .deb is kept in DIR. Concurrent callers (two `up`s at once) wait on a lock instead of racing.
deb_extract() {
  local pkg=$1 dir=$2 file=$3
  mkdir -p "$dir"
  exec 8>"$dir/.lock"
  flock 8
  if [[ -e $dir/root/$file ]]; then
    exec 8>&-
    return 0
  fi
  deb_fetch "$pkg" "$dir"
  rm -rf "$dir/root.tmp"
  dpkg-deb -x "$DEB" "$dir/root.tmp"
  rm -rf "$dir/root"
  mv "$dir/root.tmp" "$dir/root" # atomic: a half-unpacked tree never looks complete
  exec 8>&-
}

sink_install() {
  [[ -x $SINK_DIR/root/usr/sbin/smtp-sink ]] && return 0
  log "smtp-sink: extracting Debian's postfix package into $SINK_DIR (once)"
  deb_extract postfix "$SINK_DIR" usr/sbin/smtp-sink
  [[ -x $SINK_DIR/root/usr/sbin/smtp-sink ]] || die "smtp-sink: not found in the postfix package"
}

sink_libpath() {
  printf '%s' "$SINK_DIR/root/usr/lib/postfix"
}

sink_up() {
  if pid_alive "$SINK_PID" smtp-sink; then
    smtp_banner "$SINK_PORT" || die "smtp-sink: running but 127.0.0.1:$SINK_PORT does not greet"
    log "smtp-sink: ready on 127.0.0.1:$SINK_PORT (already running)"
    return 0
  fi
  if port_open 127.0.0.1 "$SINK_PORT"; then
    die "smtp-sink: something else listens on 127.0.0.1:$SINK_PORT"
  fi
  sink_install
  log "smtp-sink: starting"
  spawn "$SINK_PID" "$LOGS/smtp-sink.log" \
    env LD_LIBRARY_PATH="$(sink_libpath)" "$SINK_DIR/root/usr/sbin/smtp-sink" -u nobody \
    "127.0.0.1:$SINK_PORT" 1000
  local deadline=$((SECONDS + 20))
  until smtp_banner "$SINK_PORT"; do
    spawned_alive "$SINK_PID" || { tail_log "$LOGS/smtp-sink.log"; die "smtp-sink: exited"; }
    ((SECONDS < deadline)) || die "smtp-sink: not ready after 20 s"
    sleep 0.1
  done
  log "smtp-sink: ready on 127.0.0.1:$SINK_PORT"
}

sink_down() {
  [[ -f $SINK_PID ]] || return 0
  stop_pid smtp-sink "$SINK_PID" smtp-sink
}

# ---------------------------------------------------------------------------------------------
# Postfix relay (DSN tests)
#
# A real Postfix from Debian's postfix package (installed, not unpacked: its daemons need the
# postfix/postdrop users the package creates) relaying mail from 127.0.0.1:POSTFIX_PORT to the
# server a test runs on 127.0.0.1:POSTFIX_RELAYHOST_PORT, and sending every non-delivery or
# delivery report for POSTFIX_BOUNCE_DOMAIN to 127.0.0.1:POSTFIX_BOUNCE_PORT. Our own instance:
# config directory .stack/postfix/etc (`postfix -c`), its own queue and data directories, started
# and stopped by us, never a service. As root, Postfix accepts a -c directory without it being
# listed in alternate_config_directories of /etc/postfix/main.cf, so the default instance's
# configuration is left alone (the package is installed with "No configuration": no main.cf).

# run_progress NAME WHAT LOG CMD...: run CMD with output appended to LOG and a line every 10 s
# while it runs (so a first `up` does not look hung); the lock fds 7 and 8 are not inherited.
run_progress() {
  local name=$1 what=$2 logfile=$3 rc=0
  shift 3
  "$@" >>"$logfile" 2>&1 </dev/null 7>&- 8>&- &
  local pid=$! start=$SECONDS next=$((SECONDS + 10))
  while child_running "$pid"; do
    if ((SECONDS >= next)); then
      log "$name: still $what ($((SECONDS - start)) s)"
      next=$((next + 10))
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  return "$rc"
}

# apt_install NAME APT-ARGS...: `apt-get install -y APT-ARGS` without dialogs, output in
# LOGS/apt-NAME.log and a progress line every 10 s. apt downloads into APT_CACHE (in the cache),
# not /var/cache/apt/archives, which Debian's container images empty after every install, so a
# fresh machine with the cache downloads nothing again. `apt-get update` only when the install
# fails with the lists there are (a fresh image has none; a stale one names versions gone).
apt_install() {
  local name=$1 logfile="$LOGS/apt-$1.log"
  shift
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$APT_CACHE/partial"
  # The lock timeout: another apt-get (a person's, or a second stack.sh) waits instead of failing.
  local apt=(apt-get -o "Dir::Cache::Archives=$APT_CACHE/" -o APT::Sandbox::User=root -o DPkg::Lock::Timeout=300)
  : >"$logfile"
  if ! run_progress "$name" installing "$logfile" "${apt[@]}" install -y -q "$@"; then
    log "$name: install failed with the current package lists; apt-get update and once more"
    run_progress "$name" "updating apt's lists" "$logfile" apt-get -o DPkg::Lock::Timeout=300 update -qq ||
      { tail_log "$logfile"; die "$name: apt-get update failed"; }
    run_progress "$name" installing "$logfile" "${apt[@]}" install -y -q "$@" ||
      { tail_log "$logfile"; die "$name: apt-get install $* failed"; }
  fi
}

postfix_installed() {
  [[ -x /usr/sbin/postfix && -x /usr/sbin/postconf && -x /usr/sbin/postsuper &&
    -x /usr/sbin/postqueue && -f /usr/share/postfix/master.cf.dist ]] && id postfix >/dev/null 2>&1
}

# postfix_install: Debian's postfix without its configuration dialog (through apt_install); the
# .deb the smtp-sink unpacked is offered to apt first.
postfix_install() {
  if ! postfix_installed; then
    log "postfix: installing Debian's postfix package, no configuration dialog (log $LOGS/apt-postfix.log)"
    export DEBIAN_FRONTEND=noninteractive
    printf 'postfix postfix/main_mailer_type select No configuration\n' | debconf-set-selections ||
      die "postfix: debconf-set-selections failed"
    mkdir -p "$APT_CACHE/partial"
    local deb
    shopt -s nullglob
    for deb in "$SINK_DIR"/postfix_*.deb; do
      [[ -e $APT_CACHE/${deb##*/} ]] || cp -l "$deb" "$APT_CACHE/" 2>/dev/null || cp "$deb" "$APT_CACHE/"
    done
    shopt -u nullglob
    apt_install postfix postfix
    postfix_installed || die "postfix: /usr/sbin/postfix, postconf, postsuper, postqueue or the postfix user missing after install"
    log "postfix: installed $(postconf -dh mail_version 2>/dev/null)"
    # Debian's init script starts nothing without /etc/postfix/main.cf, which "No configuration"
    # does not write (and there is no systemd here). Should a default instance run all the same,
    # it uses /etc/postfix and /var/spool/postfix; ours uses neither.
    if postfix_master_alive /var/spool/postfix/pid/master.pid; then
      log "postfix: note: Debian's default instance runs too (from /etc/postfix); ours does not depend on it"
    fi
  fi
  [[ -f /etc/postfix/master.cf ]] || cp /usr/share/postfix/master.cf.dist /etc/postfix/master.cf
}

# postfix_paths: the queue and data directories. In .stack/postfix when the postfix OS user can
# reach .stack (its daemons chdir there), else in /var/tmp/postline-postfix-<hash>.
postfix_paths() {
  if (cd / && runuser -u postfix -- test -x "$STACK") 2>/dev/null; then
    POSTFIX_VAR="$POSTFIX_DIR"
  else
    POSTFIX_VAR="/var/tmp/postline-postfix-$HASH"
  fi
  POSTFIX_QUEUE="$POSTFIX_VAR/queue"
  POSTFIX_DATA="$POSTFIX_VAR/data"
}

# postfix_master_alive PIDFILE: the master process whose (space-padded) pid PIDFILE holds runs.
postfix_master_alive() {
  local pid
  [[ -r $1 ]] || return 1
  pid="$(tr -d ' \n' <"$1")"
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- 'postfix/sbin/master\|^master '
}

# postfix_running: our instance's master runs (its pid file is in the queue directory that our
# main.cf names, so a queue moved by postfix_paths is still found).
postfix_running() {
  local q
  q="$(sed -n 's/^queue_directory = //p' "$POSTFIX_CONF/main.cf" 2>/dev/null)"
  [[ -n $q ]] && postfix_master_alive "$q/pid/master.pid"
}

postfix_answers() {
  smtp_banner "$POSTFIX_PORT"
}

# postfix_main_cf: main.cf as this run wants it.
postfix_main_cf() {
  cat <<EOF
# Written by scripts/stack.sh on every \`up\`: change the script, not this file.
# A relay for tests: accepts mail from loopback on 127.0.0.1:$POSTFIX_PORT, relays everything to
# [127.0.0.1]:$POSTFIX_RELAYHOST_PORT, sends mail for $POSTFIX_BOUNCE_DOMAIN (bounces, DSNs) to
# [127.0.0.1]:$POSTFIX_BOUNCE_PORT, delivers nothing locally.
compatibility_level = 3.6
queue_directory = $POSTFIX_QUEUE
data_directory = $POSTFIX_DATA
mail_owner = postfix
setgid_group = postdrop
syslog_name = postfix-postline
maillog_file = $POSTFIX_LOG
maillog_file_prefixes = $LOGS
myhostname = relay.postline.test
mydomain = postline.test
myorigin = \$myhostname
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mydestination =
relay_domains =
local_recipient_maps =
alias_maps =
alias_database =
local_transport = error:local delivery disabled
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
relayhost = [127.0.0.1]:$POSTFIX_RELAYHOST_PORT
transport_maps = inline:{$POSTFIX_BOUNCE_DOMAIN=smtp:[127.0.0.1]:$POSTFIX_BOUNCE_PORT}
smtp_dns_support_level = disabled
smtpd_peername_lookup = no
smtpd_banner = \$myhostname ESMTP
smtpd_error_sleep_time = 0
smtp_tls_security_level = none
smtpd_tls_security_level = none
smtp_connect_timeout = 2s
# Fast retries and short lifetimes: a deferred mail is retried every few seconds and bounced
# (Action: failed) 30 s after it arrived. No delay warnings (delay_warning_time stays 0).
queue_run_delay = 2s
minimal_backoff_time = 2s
maximal_backoff_time = 5s
maximal_queue_lifetime = 30s
bounce_queue_lifetime = 30s
in_flow_delay = 0
# No postmaster copies of bounces or errors (they would go to the relayhost too).
notify_classes =
enable_long_queue_ids = yes
biff = no
EOF
}

# postfix_master_edits: the postconf edits that turn Debian's master.cf.dist into ours, one a
# line: no port 25 listener, ours on 127.0.0.1:POSTFIX_PORT, no service chrooted.
postfix_master_edits() {
  printf '%s\n' "-MX smtp/inet" \
    "-M 127.0.0.1:$POSTFIX_PORT/inet=127.0.0.1:$POSTFIX_PORT inet n - n - - smtpd" \
    "-F */*/chroot = n"
}

# postfix_render_master DIR: master.cf into DIR (DIR/main.cf must exist: postconf reads it).
postfix_render_master() {
  local dir=$1 opt arg
  cp /usr/share/postfix/master.cf.dist "$dir/master.cf"
  while IFS= read -r line; do
    opt=${line%% *}
    arg=${line#* }
    postconf -c "$dir" "$opt" "$arg" || die "postfix: postconf $opt '$arg' failed on $dir/master.cf"
  done < <(postfix_master_edits)
}

# postfix_check_route DIR: `postfix check` does not parse maps, so look the bounce domain up in
# DIR's transport_maps the way trivial-rewrite will.
postfix_check_route() {
  local dir=$1 route
  route="$(postmap -c "$dir" -q "$POSTFIX_BOUNCE_DOMAIN" "$(sed -n 's/^transport_maps = //p' "$dir/main.cf")" 2>&1)" || true
  [[ $route == "smtp:[127.0.0.1]:$POSTFIX_BOUNCE_PORT" ]] ||
    die "postfix: transport_maps in $dir/main.cf routes $POSTFIX_BOUNCE_DOMAIN to '$route', not smtp:[127.0.0.1]:$POSTFIX_BOUNCE_PORT"
}

# postfix_restart_keys FILE: the settings of FILE that `postfix reload` does not apply.
postfix_restart_keys() {
  grep -E '^(queue_directory|data_directory|inet_interfaces|inet_protocols|mail_owner|setgid_group) ' "$1" 2>/dev/null || true
}

# postfix_configure: write main.cf and master.cf into POSTFIX_CONF. Sets POSTFIX_CHANGED=1 when
# a file differs from what is there, POSTFIX_NEEDS_RESTART=1 when a setting only a restart
# applies does. master.cf is rendered again (four postconf runs) only when its inputs changed:
# master.cf.dist, the port or the edits, as recorded in master.cf.key; so is the route check
# only when main.cf changed. An unchanged `up` runs no Postfix tool at all.
postfix_configure() {
  local new="$POSTFIX_CONF.new" key
  POSTFIX_CHANGED=0
  POSTFIX_NEEDS_RESTART=0
  rm -rf "$new"
  mkdir -p "$new" "$POSTFIX_CONF"
  postfix_main_cf >"$new/main.cf"
  key="$(stat -c '%s %Y' /usr/share/postfix/master.cf.dist); $(postfix_master_edits | paste -sd';')"
  if ! cmp -s "$new/main.cf" "$POSTFIX_CONF/main.cf"; then
    postfix_check_route "$new"
    [[ "$(postfix_restart_keys "$new/main.cf")" == "$(postfix_restart_keys "$POSTFIX_CONF/main.cf")" ]] ||
      POSTFIX_NEEDS_RESTART=1
    POSTFIX_CHANGED=1
    mv -f "$new/main.cf" "$POSTFIX_CONF/main.cf"
  fi
  if [[ ! -f $POSTFIX_CONF/master.cf || "$(cat "$POSTFIX_CONF/master.cf.key" 2>/dev/null)" != "$key" ]]; then
    cp "$POSTFIX_CONF/main.cf" "$new/main.cf"
    postfix_render_master "$new"
    if ! cmp -s "$new/master.cf" "$POSTFIX_CONF/master.cf"; then
      POSTFIX_CHANGED=1
      mv -f "$new/master.cf" "$POSTFIX_CONF/master.cf"
    fi
    printf '%s\n' "$key" >"$POSTFIX_CONF/master.cf.key"
  fi
  rm -rf "$new"
}

# postfix_ctl ARGS...: the postfix command on our instance; messages into the mail log.
postfix_ctl() {
  postfix -c "$POSTFIX_CONF" "$@" </dev/null >>"$LOGS/postfix-ctl.log" 2>&1 7>&- 8>&-
}

postfix_wait() {
  local deadline=$((SECONDS + 20))
  until postfix_answers; do
    postfix_running || { tail_log "$POSTFIX_LOG"; die "postfix: the master exited; see $POSTFIX_LOG"; }
    ((SECONDS < deadline)) || { tail_log "$POSTFIX_LOG"; die "postfix: 127.0.0.1:$POSTFIX_PORT does not greet after 20 s"; }
    sleep 0.1
  done
}

postfix_summary() {
  printf '127.0.0.1:%s, relayhost [127.0.0.1]:%s, %s to 127.0.0.1:%s, log %s' \
    "$POSTFIX_PORT" "$POSTFIX_RELAYHOST_PORT" "$POSTFIX_BOUNCE_DOMAIN" "$POSTFIX_BOUNCE_PORT" "$POSTFIX_LOG"
}

postfix_up() {
  postfix_install
  postfix_paths
  # The running master's old config is needed to know whether it runs; configure after.
  local was_running=0
  postfix_running && was_running=1
  postfix_configure
  if ((was_running)); then
    if ((POSTFIX_NEEDS_RESTART)); then
      log "postfix: main.cf changed a setting that needs a restart (queue or data directory, interfaces); restarting once"
      postfix_stop_old
    elif ((POSTFIX_CHANGED)); then
      log "postfix: main.cf or master.cf changed; postfix reload"
      postfix_ctl reload || { tail_log "$POSTFIX_LOG"; die "postfix: postfix reload failed"; }
      postfix_wait
      log "postfix: ready on $(postfix_summary) (reloaded)"
      return 0
    else
      postfix_answers || die "postfix: our instance runs but 127.0.0.1:$POSTFIX_PORT does not greet (see $POSTFIX_LOG)"
      log "postfix: ready on $(postfix_summary) (already running)"
      return 0
    fi
  fi
  if port_open 127.0.0.1 "$POSTFIX_PORT"; then
    die "postfix: something else listens on 127.0.0.1:$POSTFIX_PORT; stop it or set POSTLINE_POSTFIX_PORT"
  fi
  mkdir -p "$POSTFIX_QUEUE"
  chown root:root "$POSTFIX_QUEUE"
  chmod 755 "$POSTFIX_QUEUE"
  install -d -o postfix -g postfix -m 700 "$POSTFIX_DATA"
  touch "$POSTFIX_LOG"
  log "postfix: starting on 127.0.0.1:$POSTFIX_PORT (config $POSTFIX_CONF, queue $POSTFIX_QUEUE)"
  postfix_ctl check || { tail_log "$LOGS/postfix-ctl.log"; tail_log "$POSTFIX_LOG"; die "postfix: postfix check failed"; }
  postfix_ctl start || { tail_log "$LOGS/postfix-ctl.log"; tail_log "$POSTFIX_LOG"; die "postfix: postfix start failed"; }
  postfix_wait
  log "postfix: ready on $(postfix_summary)"
}

# postfix_stop_old: stop the master that runs from the queue directory main.cf named before
# postfix_configure rewrote it (a restart after the queue moved).
postfix_stop_old() {
  local q pid i
  for q in "$POSTFIX_DIR/queue" "/var/tmp/postline-postfix-$HASH/queue"; do
    postfix_master_alive "$q/pid/master.pid" || continue
    pid="$(tr -d ' \n' <"$q/pid/master.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      [[ -d /proc/$pid ]] || break
      sleep 0.1
    done
    [[ -d /proc/$pid ]] && die "postfix: the master (pid $pid) did not stop in 30 s"
  done
  return 0
}

postfix_down() {
  if ! postfix_installed || ! postfix_running; then
    log "postfix: not running"
    return 0
  fi
  log "postfix: stopping"
  postfix_ctl stop || true
  local i
  for ((i = 0; i < 300; i++)); do
    postfix_running || break
    sleep 0.1
  done
  postfix_running && die "postfix: the master did not stop in 30 s (postfix -c $POSTFIX_CONF abort)"
  log "postfix: stopped"
}

# postfix_queue_count: the number of messages in our instance's queue (postqueue -j: a JSON
# object a line).
postfix_queue_count() {
  postqueue -c "$POSTFIX_CONF" -j 2>/dev/null 7>&- 8>&- | grep -c '^{' || true
}

cmd_postfix_flush() {
  postfix_installed && postfix_running || die "postfix-flush: our Postfix is not running (scripts/stack.sh postfix)"
  postsuper -c "$POSTFIX_CONF" -d ALL 7>&- 8>&-
}

# ---------------------------------------------------------------------------------------------
# kcat (a Kafka client other than ours, for the bad-input end-to-end tests)

# kcat_missing_deps PACKAGE...: the packages these depend on (transitively) that dpkg does not
# list as installed, one a line, excluding the arguments themselves.
kcat_missing_deps() {
  local -A seen=()
  local queue=("$@") pkg dep
  for pkg in "$@"; do seen[$pkg]=1; done
  while ((${#queue[@]})); do
    pkg=${queue[0]}
    queue=("${queue[@]:1}")
    while read -r dep; do
      [[ -n $dep && -z ${seen[$dep]:-} ]] || continue
      seen[$dep]=1
      [[ "$(dpkg-query -W -f='${Status}' "$dep" 2>/dev/null)" == "install ok installed" ]] && continue
      printf '%s\n' "$dep"
      queue+=("$dep")
    done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$pkg" 2>/dev/null | sed -n 's/^ *|\{0,1\}Depends: \([^<][^ ]*\).*/\1/p' | sed 's/:any$//')
  done
}

# Debian 12's kcat links librdkafka 2.0.2, whose SCRAM client Kafka 4.x rejects (it repeats the
# client nonce; fixed in librdkafka 2.6.1): use it against the PLAINTEXT listener, or for TLS-only
# checks on 9094; SCRAM logins to 9094 fail with "invalid credentials" whatever the password.
#
# kcat_install: unpack (never install) Debian's kcat and the libraries it needs that this machine
# lacks (librdkafka1, libyajl2 on a plain Debian) into KCAT_DIR/root, check with ldd that every
# library resolves, and write KCAT_WRAPPER, which runs it with LD_LIBRARY_PATH set.
kcat_install() {
  [[ -x $KCAT_WRAPPER && -x $KCAT_DIR/root/usr/bin/kcat ]] && return 0
  mkdir -p "$KCAT_DIR"
  exec 8>"$KCAT_DIR/.lock"
  flock 8
  if [[ -x $KCAT_WRAPPER && -x $KCAT_DIR/root/usr/bin/kcat ]]; then
    exec 8>&-
    return 0
  fi
  apt-cache show kcat >/dev/null 2>&1 || apt-get update -qq >"$LOGS/apt.log" 2>&1 || true
  local pkgs pkg libdirs missing
  mapfile -t pkgs < <(printf 'kcat\n'; kcat_missing_deps kcat)
  log "kcat: extracting Debian's ${pkgs[*]} into $KCAT_DIR (once)"
  rm -rf "$KCAT_DIR/root.tmp"
  for pkg in "${pkgs[@]}"; do
    deb_fetch "$pkg" "$KCAT_DIR"
    dpkg-deb -x "$DEB" "$KCAT_DIR/root.tmp" || die "kcat: unpacking $DEB failed"
  done
  [[ -x $KCAT_DIR/root.tmp/usr/bin/kcat ]] || die "kcat: no usr/bin/kcat in Debian's kcat package"
  rm -rf "$KCAT_DIR/root"
  mv "$KCAT_DIR/root.tmp" "$KCAT_DIR/root"
  libdirs="$(find "$KCAT_DIR/root" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)"
  missing="$(LD_LIBRARY_PATH="$libdirs" ldd "$KCAT_DIR/root/usr/bin/kcat" | grep 'not found' || true)"
  [[ -z $missing ]] || die "kcat: libraries still missing after unpacking ${pkgs[*]}: $missing"
  cat >"$KCAT_WRAPPER.tmp" <<EOF
#!/bin/sh
# Written by scripts/stack.sh: Debian's ${pkgs[*]} unpacked (not installed) in
# $KCAT_DIR/root; LD_LIBRARY_PATH finds the unpacked libraries.
LD_LIBRARY_PATH='$libdirs'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec '$KCAT_DIR/root/usr/bin/kcat' "\$@"
EOF
  chmod 755 "$KCAT_WRAPPER.tmp"
  mv -f "$KCAT_WRAPPER.tmp" "$KCAT_WRAPPER"
  exec 8>&-
}

# ---------------------------------------------------------------------------------------------
# Prometheus tools (promtool for the alert-rule tests; the server for tests that scrape)

prom_install() {
  [[ -x $PROMTOOL_BIN && -x $PROMETHEUS_BIN ]] && return 0
  log "prometheus: extracting Debian's prometheus package into $PROM_DIR (once)"
  deb_extract prometheus "$PROM_DIR" usr/bin/promtool
  [[ -x $PROMTOOL_BIN && -x $PROMETHEUS_BIN ]] || die "prometheus: promtool or prometheus not found in the package"
}

# ---------------------------------------------------------------------------------------------
# Chromium (the headless browser that UI tests drive through internal/testenv.Browser)

# chromium_version: print what `chromium --version` says (its last line: Debian's wrapper may
# complain about /dev/shm first); fail when it does not run. ~35 ms, so `up` can afford it each
# time, and it catches a browser whose libraries do not load, not only a missing file.
chromium_version() {
  local out
  out="$("$CHROMIUM_BIN" --version 2>&1 </dev/null 7>&- 8>&-)" || { printf '%s\n' "$out"; return 1; }
  printf '%s\n' "${out##*$'\n'}"
}

# chromium_install: Debian's chromium without its recommends (a sandbox helper, printer and
# desktop tools a headless browser does not use: 25 packages instead of 130 on this image).
chromium_install() {
  chromium_version >/dev/null && return 0
  log "chromium: installing Debian's chromium package (~125 MB the first time; log $LOGS/apt-chromium.log)"
  apt_install chromium --no-install-recommends chromium
  local version
  version="$(chromium_version)" || die "chromium: $CHROMIUM_BIN --version fails after install: $version"
  log "chromium: installed $version"
}

# ---------------------------------------------------------------------------------------------
# Commands

cmd_up() {
  local with_sink=0 with_cluster=0 arg
  for arg in "$@"; do
    case $arg in
    --with-sink) with_sink=1 ;;
    --with-cluster) with_cluster=1 ;;
    *) die "up: unknown flag $arg" ;;
    esac
  done
  mkdir -p "$STACK" "$LOGS"
  # Two `up`s at once (several test runs) take turns: neither restarts what the other starts.
  # Fd 7 is closed in every service we start (spawn, as_postgres) so none inherits the lock.
  exec 7>"$STACK/up.lock"
  flock 7
  tls_ensure
  # Kafka's JVM boots in the background while Postgres and Mailpit come up.
  kafka_start
  if ((with_cluster)); then
    # So do the cluster's three, started under the cluster's lock (fd 6), released before
    # anything else inherits it; waited for last.
    exec 6>"$STACK/cluster.lock"
    mkdir -p "$CLUSTER_DIR"
    flock 6
    cluster_start
    exec 6>&-
  fi
  pg_up
  mailpit_start
  postfix_up
  prom_install
  kcat_install
  chromium_install
  kafka_wait
  mailpit_wait
  if ((with_sink)); then
    sink_up
  fi
  if ((with_cluster)); then
    cluster_wait
  fi
}

cmd_down() {
  sink_down
  mailpit_down
  postfix_down
  cluster_down
  kafka_down
  pg_down
}

cmd_status() {
  local rc=0
  if kafka_answers; then
    log "kafka: up on $KAFKA_HOST:$KAFKA_PORT ($KAFKA_VERSION)"
  else
    log "kafka: down ($KAFKA_HOST:$KAFKA_PORT)"
    rc=1
  fi
  if tls_handshake "$KAFKA_HOST:$KAFKA_SECURE_PORT"; then
    log "kafka: SASL_SSL up on $KAFKA_HOST:$KAFKA_SECURE_PORT (certificate verified against $TLS/ca.pem; SCRAM-SHA-512 user $KAFKA_SASL_USER)"
  else
    log "kafka: SASL_SSL down or certificate not verified ($KAFKA_HOST:$KAFKA_SECURE_PORT)"
    rc=1
  fi
  if pg_answers; then
    if tls_handshake "127.0.0.1:$PG_PORT" postgres; then
      log "postgres: up on 127.0.0.1:$PG_PORT (TLS verified against $TLS/ca.pem)"
    else
      log "postgres: up on 127.0.0.1:$PG_PORT, but without TLS or with an unverified certificate"
    fi
  else
    log "postgres: down (127.0.0.1:$PG_PORT)"
    rc=1
  fi
  if mailpit_answers; then
    log "mailpit: up, SMTP 127.0.0.1:$MAILPIT_SMTP_PORT, API http://127.0.0.1:$MAILPIT_HTTP_PORT"
  else
    log "mailpit: down (127.0.0.1:$MAILPIT_SMTP_PORT / :$MAILPIT_HTTP_PORT)"
    rc=1
  fi
  if postfix_answers; then
    log "postfix: up on $(postfix_summary), $(postfix_queue_count) queued"
  else
    log "postfix: down (127.0.0.1:$POSTFIX_PORT)"
    rc=1
  fi
  if smtp_banner "$SINK_PORT"; then
    log "smtp-sink: up on 127.0.0.1:$SINK_PORT"
  else
    log "smtp-sink: down (optional: up --with-sink)"
  fi
  if ! cluster_status >/dev/null; then
    log "cluster: not every node answers (optional: cluster up or up --with-cluster; cluster status)"
  else
    log "cluster: up on $(cluster_brokers)"
  fi
  return "$rc"
}

cmd_env() {
  cat <<EOF
export POSTLINE_TEST_KAFKA=$KAFKA_HOST:$KAFKA_PORT
export POSTLINE_TEST_KAFKA_SECURE=$KAFKA_HOST:$KAFKA_SECURE_PORT
export POSTLINE_TEST_KAFKA_SASL_USER=$KAFKA_SASL_USER
export POSTLINE_TEST_KAFKA_SASL_PASSWORD_FILE=$TLS/kafka-password
export POSTLINE_TEST_TLS_CA=$TLS/ca.pem
export POSTLINE_TEST_TLS_UNTRUSTED_CA=$TLS/untrusted-ca.pem
export POSTLINE_TEST_DATABASE_URL='postgres://postline:postline@127.0.0.1:$PG_PORT/postline?sslmode=disable'
export POSTLINE_TEST_DATABASE_URL_TLS='postgres://postline:postline@127.0.0.1:$PG_PORT/postline?sslmode=verify-full&sslrootcert=$TLS/ca.pem'
export POSTLINE_TEST_SMTP_SINK=127.0.0.1:$SINK_PORT
export POSTLINE_TEST_MAILPIT_BIN=$MAILPIT_BIN
export POSTLINE_TEST_MAILPIT_SMTP=127.0.0.1:$MAILPIT_SMTP_PORT
export POSTLINE_TEST_MAILPIT_API=http://127.0.0.1:$MAILPIT_HTTP_PORT
export POSTLINE_TEST_PROMTOOL=$PROMTOOL_BIN
export POSTLINE_TEST_PROMETHEUS_BIN=$PROMETHEUS_BIN
export POSTLINE_TEST_KCAT=$KCAT_WRAPPER
export POSTLINE_TEST_POSTFIX=127.0.0.1:$POSTFIX_PORT
export POSTLINE_TEST_POSTFIX_DEST=127.0.0.1:$POSTFIX_RELAYHOST_PORT
export POSTLINE_TEST_BOUNCE_ADDR=127.0.0.1:$POSTFIX_BOUNCE_PORT
export POSTLINE_TEST_BOUNCE_DOMAIN=$POSTFIX_BOUNCE_DOMAIN
export POSTLINE_TEST_POSTFIX_CONFIG=$POSTFIX_CONF
export POSTLINE_TEST_POSTFIX_LOG=$POSTFIX_LOG
EOF
  if [[ -x $CHROMIUM_BIN ]]; then
    printf 'export POSTLINE_TEST_CHROMIUM=%s\n' "$CHROMIUM_BIN"
  fi
}

cmd_sink_env() {
  mkdir -p "$STACK" "$LOGS"
  sink_install >&2
  cat <<EOF
export LD_LIBRARY_PATH=$(sink_libpath)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export POSTLINE_SMTP_SINK_BIN=$SINK_DIR/root/usr/sbin/smtp-sink
export POSTLINE_SMTP_SOURCE_BIN=$SINK_DIR/root/usr/sbin/smtp-source
EOF
}

main() {
  local cmd="${1:-up}"
  [[ $# -gt 0 ]] && shift
  case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  sink)
    mkdir -p "$STACK" "$LOGS"
    sink_up
    ;;
  sink-env) cmd_sink_env ;;
  postfix)
    mkdir -p "$STACK" "$LOGS"
    exec 7>"$STACK/up.lock"
    flock 7
    postfix_up
    ;;
  postfix-flush) cmd_postfix_flush ;;
  postfix-queue)
    postfix_installed && postfix_running || die "postfix-queue: our Postfix is not running (scripts/stack.sh postfix)"
    postqueue -c "$POSTFIX_CONF" -p
    ;;
  postfix-log) printf '%s\n' "$POSTFIX_LOG" ;;
  smtp-source-path)
    mkdir -p "$STACK" "$LOGS"
    sink_install >&2
    printf '%s\n' "$SINK_DIR/root/usr/sbin/smtp-source"
    ;;
  promtool-path | prometheus-path)
    mkdir -p "$STACK" "$LOGS"
    prom_install >&2
    if [[ $cmd == promtool-path ]]; then printf '%s\n' "$PROMTOOL_BIN"; else printf '%s\n' "$PROMETHEUS_BIN"; fi
    ;;
  kcat-path)
    mkdir -p "$STACK" "$LOGS"
    kcat_install >&2
    printf '%s\n' "$KCAT_WRAPPER"
    ;;
  chromium)
    mkdir -p "$STACK" "$LOGS"
    exec 7>"$STACK/up.lock"
    flock 7
    chromium_install
    ;;
  cluster) cmd_cluster "$@" ;;
  -h | --help | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command $cmd (up, down, status, env, sink, sink-env, postfix, postfix-flush, postfix-queue, postfix-log, smtp-source-path, promtool-path, prometheus-path, kcat-path, chromium, cluster)" ;;
  esac
}

# Sourcing (for debugging single functions) defines everything without running a command.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
