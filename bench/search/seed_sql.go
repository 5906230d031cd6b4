package main

// seedHelpersSQL creates, in the benchmark's schema beside Postline's
// tables, the marker table and the functions the seed and the query
// picker share, so that both derive an address the same way:
//
//   - bench_message_id(i): the Message-ID of mail i;
//   - bench_u(i, s): a uniform draw in [0, 1) from the number i and the
//     stream s (a hash, so every run writes the same rows);
//   - bench_domain(d): the domain at draw d: five big domains, webmail
//     alike, take 62 % of the addresses (gmail.example alone 35 %), 200
//     company domains 18 %, and 100,000 small ones the last 20 % (about 24
//     recipients each at 10M mails);
//   - bench_customer(j): the address of recurring customer j, one of
//     bench_customers (5,000).
const seedHelpersSQL = `
CREATE TABLE IF NOT EXISTS bench_search_seed (
	version      integer     NOT NULL,
	mails        bigint      NOT NULL,
	events_every integer     NOT NULL,
	seeded_at    timestamptz NOT NULL DEFAULT now(),
	seed_seconds float8      NOT NULL
);
CREATE OR REPLACE FUNCTION bench_u(i int8, s int8) RETURNS float8
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN (hashint8extended(i, s) & 1073741823)::float8 / 1073741824;
CREATE OR REPLACE FUNCTION bench_message_id(i int8) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN 'sb' || i || '.' || substr(md5(i::text), 1, 10) || '@mail.bench.postline.test';
CREATE OR REPLACE FUNCTION bench_domain(d float8) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN CASE
		WHEN d < 0.35 THEN 'gmail.example'
		WHEN d < 0.45 THEN 'yahoo.example'
		WHEN d < 0.53 THEN 'outlook.example'
		WHEN d < 0.58 THEN 'hotmail.example'
		WHEN d < 0.62 THEN 'icloud.example'
		WHEN d < 0.80 THEN 'corp' || floor((d - 0.62) / 0.18 * 200)::int || '.example'
		ELSE 'shop' || floor((d - 0.80) / 0.20 * 100000)::int || '.example.'
			|| (ARRAY['com', 'net', 'org', 'de', 'fr', 'io'])[1 + floor((d - 0.80) / 0.20 * 100000)::int % 6]
	END;
CREATE OR REPLACE FUNCTION bench_customer(j int8) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN 'Customer.' || j || '@' || bench_domain(bench_u(j, 9));
`

// seedChunkSQL writes mails $1 to $2 of $3, the newest created at $4 and
// the oldest 30 days before (in the order of their numbers, as a service
// inserts them), with their recipients, and the events of every $5-th mail
// (with dead webhook deliveries for one in a hundred of those):
//
//   - 1 recipient (80 %), 2 (15 %) or 3 (5 %);
//   - a recipient is one of the recurring customers one time in ten, the
//     first ones far more often (customer j with probability about
//     1/(2 sqrt(5000 j))): the first gets about 1.4 % of those mails, the
//     last about 0.01 %; else an address of its own at a domain of
//     bench_domain, its local part capitalized one time in ten, its domain
//     capitalized (4 %) or in capitals (1 %);
//   - mail status sent (94 %), failed (3 %), dead (2 %), suppressed (1 %);
//     a sent mail's recipients delivered (72 %), accepted (22 %), bounced
//     (5 %, hard, soft or policy) or complained (1 %);
//   - 40 tenants, the first ones the biggest; 70 % transactional;
//   - recipient rows written a second after their mail's creation, one
//     mail's in a hundred an hour after (re-claimed after a crash);
//   - events: a deferral for one recipient in five, then its acceptance
//     and its report, or its failure, dead letter or suppression, each
//     with the document the Indexer stores.
const seedChunkSQL = `
WITH base AS MATERIALIZED (
	SELECT i,
		bench_message_id(i) AS message_id,
		$4::timestamptz - make_interval(secs => 30 * 86400 * ($3::int8 - i)::float8 / $3::int8) AS created_at,
		CASE WHEN bench_u(i, 1) < 0.80 THEN 1 WHEN bench_u(i, 1) < 0.95 THEN 2 ELSE 3 END AS n,
		CASE WHEN bench_u(i, 2) < 0.94 THEN 'sent' WHEN bench_u(i, 2) < 0.97 THEN 'failed'
			WHEN bench_u(i, 2) < 0.99 THEN 'dead' ELSE 'suppressed' END AS status,
		'tenant-' || floor(40 * power(bench_u(i, 3), 3))::int AS tenant,
		CASE WHEN bench_u(i, 4) < 0.7 THEN 'transactional' ELSE 'bulk' END AS stream,
		CASE WHEN bench_u(i, 15) < 0.01 THEN interval '1 hour' ELSE interval '1 second' END AS written_after
	FROM generate_series($1::int8, $2::int8) AS i
),
rc AS MATERIALIZED (
	SELECT b.*, k,
		CASE WHEN bench_u(i * 4 + k, 5) < 0.10
			THEN bench_customer(floor(5000 * power(bench_u(i * 4 + k, 6), 2))::int8)
			ELSE CASE WHEN bench_u(i * 4 + k, 10) < 0.10 THEN 'U' ELSE 'u' END
				|| to_hex(hashint8extended(i * 4 + k, 7) & 1099511627775) || '@'
				|| CASE WHEN bench_u(i * 4 + k, 11) < 0.04 THEN initcap(bench_domain(bench_u(i * 4 + k, 8)))
					WHEN bench_u(i * 4 + k, 11) < 0.05 THEN upper(bench_domain(bench_u(i * 4 + k, 8)))
					ELSE bench_domain(bench_u(i * 4 + k, 8)) END
		END AS address,
		CASE b.status WHEN 'sent' THEN
			CASE WHEN bench_u(i * 4 + k, 12) < 0.72 THEN 'delivered' WHEN bench_u(i * 4 + k, 12) < 0.94 THEN 'accepted'
				WHEN bench_u(i * 4 + k, 12) < 0.99 THEN 'bounced' ELSE 'complained' END
			ELSE b.status END AS state,
		CASE WHEN bench_u(i * 4 + k, 13) < 0.6 THEN 'hard' WHEN bench_u(i * 4 + k, 13) < 0.9 THEN 'soft' ELSE 'policy' END AS bounce_type,
		bench_u(i * 4 + k, 14) < 0.2 AS deferred
	FROM base b, generate_series(0, b.n - 1) AS k
),
messages AS (
	INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, provider, error_class,
		last_error, priority, tenant, enqueued_at, created_at, updated_at, sent_at, first_seen, stream,
		confirm_by, confirmation, confirmed_at)
	SELECT message_id, status, 2, CASE WHEN status = 'dead' THEN 5 ELSE 1 END,
		decode(md5(message_id), 'hex'), 'primary',
		CASE status WHEN 'failed' THEN 'permanent' WHEN 'dead' THEN 'expired' END,
		CASE status WHEN 'failed' THEN '550 5.7.1 message refused' WHEN 'dead' THEN '451 4.3.0 try again later' END,
		'normal', tenant, created_at - interval '50 milliseconds', created_at,
		created_at + interval '60 seconds', CASE WHEN status = 'sent' THEN created_at + interval '2 seconds' END,
		created_at, stream,
		CASE WHEN status = 'sent' THEN created_at + interval '1 day' END,
		CASE WHEN status = 'sent' THEN 'confirmed' END,
		CASE WHEN status = 'sent' THEN created_at + interval '60 seconds' END
	FROM base
),
recipients AS (
	INSERT INTO postline_recipients (message_id, idx, ref, address, state, attempt, provider, bounce_type,
		status, code, diagnostic, rule, source, feedback_type, accepted_at, resolved_at, updated_at, confirm_by,
		created_at)
	SELECT message_id, k, decode(substr(md5(message_id || ':' || k), 1, 16), 'hex'), address, state, 1, 'primary',
		CASE WHEN state = 'bounced' THEN bounce_type END,
		CASE state WHEN 'bounced' THEN '5.1.1' WHEN 'delivered' THEN '2.0.0' WHEN 'failed' THEN '5.7.1' END,
		CASE state WHEN 'bounced' THEN 550 WHEN 'delivered' THEN 250 WHEN 'failed' THEN 550 END,
		CASE WHEN state = 'bounced' THEN 'smtp; 550 5.1.1 user unknown' END,
		CASE WHEN state = 'bounced' THEN 'user-unknown' END,
		CASE WHEN state IN ('delivered', 'bounced') THEN 'dsn' WHEN state = 'complained' THEN 'arf' END,
		CASE WHEN state = 'complained' THEN 'abuse' END,
		CASE WHEN state IN ('delivered', 'accepted', 'bounced', 'complained') THEN created_at + interval '2 seconds' END,
		CASE WHEN state IN ('delivered', 'bounced', 'complained') THEN created_at + interval '60 seconds' END,
		created_at + interval '60 seconds',
		CASE WHEN state IN ('delivered', 'accepted', 'bounced', 'complained') THEN created_at + interval '1 day' END,
		created_at + written_after
	FROM rc
),
ev AS MATERIALIZED (
	SELECT rc.message_id, rc.tenant, rc.stream, rc.address, rc.k, rc.i, e.type, e.attempt,
		rc.created_at + e.after AS at,
		'evt_' || md5(rc.message_id || ':' || rc.k || ':' || e.type) AS event_id,
		rc.state, rc.bounce_type
	FROM rc, LATERAL (VALUES
		('deferred', 1, interval '1 second', rc.deferred OR rc.state = 'dead'),
		('accepted', CASE WHEN rc.deferred THEN 2 ELSE 1 END, interval '2 seconds',
			rc.state IN ('delivered', 'accepted', 'bounced', 'complained')),
		(rc.state, CASE WHEN rc.deferred THEN 2 ELSE 1 END, interval '60 seconds',
			rc.state IN ('delivered', 'bounced', 'complained', 'failed', 'dead', 'suppressed'))
	) AS e(type, attempt, after, happened)
	WHERE rc.i % $5::int8 = 0 AND e.happened
),
events AS (
	INSERT INTO postline_mail_events (event_id, message_id, at, type, recipient_index, doc, indexed_at)
	SELECT event_id, message_id, at, type, k, jsonb_strip_nulls(jsonb_build_object(
		'schema', 'postline.event/v1', 'id', event_id, 'type', type, 'at', at, 'message_id', message_id,
		'tenant', tenant, 'stream', stream, 'recipient', address, 'recipient_index', k, 'attempt', attempt,
		'provider', 'primary',
		'class', CASE type WHEN 'deferred' THEN 'transient' WHEN 'failed' THEN 'permanent' WHEN 'dead' THEN 'expired' END,
		'reason', CASE type WHEN 'deferred' THEN 'smtp_transient' WHEN 'failed' THEN 'smtp_permanent'
			WHEN 'dead' THEN 'max_attempts' WHEN 'suppressed' THEN 'hard_bounce' END,
		'next_attempt_at', CASE WHEN type = 'deferred' THEN at + interval '30 seconds' END,
		'bounce', CASE WHEN type = 'bounced' THEN jsonb_build_object('type', bounce_type, 'status', '5.1.1', 'code', 550,
			'diagnostic', 'smtp; 550 5.1.1 user unknown', 'rule', 'user-unknown', 'source', 'dsn') END,
		'feedback_type', CASE WHEN type = 'complained' THEN 'abuse' END)),
		at + interval '100 milliseconds'
	FROM ev
)
INSERT INTO postline_webhook_queue (endpoint, event_id, event_type, tenant, event_at, payload, status, attempts,
	first_at, next_at, last_status, last_error, dead_at, dead_reason)
SELECT 'https://hooks.bench.example/postline', event_id, type, tenant, at, '\x7b7d'::bytea, 'dead', 8,
	at, at + interval '1 hour', 500, 'HTTP 500', at + interval '1 hour', 'max_attempts'
FROM ev WHERE ev.i % ($5::int8 * 100) = 0`
