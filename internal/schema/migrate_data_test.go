package schema

import (
	"slices"
	"testing"

	"github.com/postline/postline/internal/testenv"
)

// TestLeanMessagesMigratesExistingRows applies 0011 to a schema that
// 0001-0010 left with data, as the dev stack's database is: the record
// copies of rows still in flight move to postline_message_records (a
// terminal row has none to move), the columns and the indexes that kept
// status updates from being HOT go, and accepted recipients get their
// mail's confirm_by for the confirmation sweep.
func TestLeanMessagesMigratesExistingRows(t *testing.T) {
	t.Parallel()
	_, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := migrateTo(ctx, pool, 10); err != nil {
		t.Fatalf("migrate to 0010: %v", err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, lease_owner,
			lease_expires_at, payload, record_key, record_headers, first_seen, confirm_by)
		VALUES
			('<sending@x>', 'sending', 1, 1, '\x01', 'w1', now(), '{"v":1}', 'k', '{"traceparent":"tp"}', now(), NULL),
			('<retrying@x>', 'retrying', 2, 2, '\x02', NULL, NULL, '{"v":2}', NULL, NULL, now(), NULL),
			('<sent@x>', 'sent', 2, 1, '\x03', NULL, NULL, NULL, 'k3', NULL, now(), now() + interval '1 day');
		INSERT INTO postline_recipients (message_id, idx, ref, address, state)
		VALUES ('<sent@x>', 0, '\x00', 'a@example.net', 'accepted'), ('<sent@x>', 1, '\x00', 'b@example.net', 'delivered')`); err != nil {
		t.Fatalf("seed 0010 rows: %v", err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}

	rows, err := pool.Query(ctx, `SELECT message_id, convert_from(payload, 'UTF8'), COALESCE(convert_from(record_key, 'UTF8'), ''),
		COALESCE(record_headers->>'traceparent', '') FROM postline_message_records ORDER BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for rows.Next() {
		var id, payload, key, tp string
		if err := rows.Scan(&id, &payload, &key, &tp); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, id+" "+payload+" "+key+" "+tp)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{`<retrying@x> {"v":2}  `, `<sending@x> {"v":1} k tp`}; !slices.Equal(copies, want) {
		t.Errorf("record copies = %q, want %q", copies, want)
	}

	var columns int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'postline_messages'
			AND column_name IN ('payload', 'record_key', 'record_headers')`).Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if columns != 0 {
		t.Errorf("postline_messages still has %d of payload, record_key, record_headers", columns)
	}

	var indexes []string
	rows, err = pool.Query(ctx, `SELECT indexname FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'postline_messages' ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Neither indexes a column a status update changes.
	if want := []string{"postline_messages_created_idx", "postline_messages_pkey"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes of postline_messages = %v, want %v", indexes, want)
	}

	var options []string
	if err := pool.QueryRow(ctx, `SELECT COALESCE(reloptions, '{}') FROM pg_class
		WHERE oid = 'postline_messages'::regclass`).Scan(&options); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(options, func(o string) bool { return len(o) > 11 && o[:11] == "fillfactor=" }) {
		t.Errorf("postline_messages options %v, want a fillfactor", options)
	}

	var accepted, other int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE r.state = 'accepted' AND r.confirm_by = m.confirm_by),
		count(*) FILTER (WHERE r.state <> 'accepted' AND r.confirm_by IS NOT NULL)
		FROM postline_recipients r JOIN postline_messages m USING (message_id)`).Scan(&accepted, &other); err != nil {
		t.Fatal(err)
	}
	if accepted != 1 || other != 0 {
		t.Errorf("recipients with their mail's confirm_by: %d accepted (want 1), %d others (want 0)", accepted, other)
	}
}
