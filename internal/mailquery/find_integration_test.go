package mailquery_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/mailquery"
)

func TestFindFilters(t *testing.T) {
	pool := migrated(t)
	now := time.Now().UTC().Truncate(time.Second)
	at := func(minutesAgo int) time.Time { return now.Add(-time.Duration(minutesAgo) * time.Minute) }
	bounced := rcpt(1, "bob@example.org", idempotency.RecipientBounced)
	bounced.BounceType, bounced.Rule, bounced.Code, bounced.Status = "hard", "user_unknown", 550, "5.1.1"
	failed := rcpt(0, "eve@example.net", idempotency.RecipientFailed)
	seed(t, pool,
		seeded{id: "m1@shop", tenant: "acme", status: idempotency.StatusSent, createdAt: at(5),
			rcpts: []idempotency.RecipientFate{rcpt(0, "Ada@Example.com", idempotency.RecipientAccepted), bounced}},
		seeded{id: "m2@shop", tenant: "acme", status: idempotency.StatusSent, createdAt: at(4),
			rcpts: []idempotency.RecipientFate{rcpt(0, "ada@example.com", idempotency.RecipientAccepted)}},
		seeded{id: "m3@shop", tenant: "beta", status: idempotency.StatusSuppressed, createdAt: at(3),
			rcpts: []idempotency.RecipientFate{rcpt(0, "carol@EXAMPLE.COM", idempotency.RecipientSuppressed)}},
		seeded{id: "m4@shop", tenant: "beta", status: idempotency.StatusRetrying, class: "throttled", createdAt: at(2),
			rcpts: []idempotency.RecipientFate{rcpt(0, "dave@sub.example.com", idempotency.RecipientPending)}},
		seeded{id: "m5@shop", tenant: "acme", status: idempotency.StatusFailed, class: "permanent", createdAt: at(1),
			rcpts: []idempotency.RecipientFate{failed}},
	)
	r := newReader(t, pool)

	tests := []struct {
		name string
		f    mailquery.Filter
		want []string
	}{
		{"everything, newest first", mailquery.Filter{}, []string{"m5@shop", "m4@shop", "m3@shop", "m2@shop", "m1@shop"}},
		{"message ID", mailquery.Filter{MessageID: "m3@shop"}, []string{"m3@shop"}},
		{"exact address", mailquery.Filter{Recipient: "Ada@Example.com"}, []string{"m1@shop"}},
		{"local part is exact", mailquery.Filter{Recipient: "ada@example.com"}, []string{"m2@shop"}},
		{"domain case does not matter", mailquery.Filter{Recipient: "Ada@EXAMPLE.COM"}, []string{"m1@shop"}},
		{"stored domain case does not matter", mailquery.Filter{Recipient: "carol@example.com"}, []string{"m3@shop"}},
		{"local part case matters", mailquery.Filter{Recipient: "CAROL@example.com"}, nil},
		{"in angle brackets", mailquery.Filter{Recipient: "<bob@example.org>"}, []string{"m1@shop"}},
		{"whole domain", mailquery.Filter{Recipient: "@example.com"}, []string{"m3@shop", "m2@shop", "m1@shop"}},
		{"whole domain in any case", mailquery.Filter{Recipient: "@Example.COM"}, []string{"m3@shop", "m2@shop", "m1@shop"}},
		{"subdomain is its own domain", mailquery.Filter{Recipient: "@sub.example.com"}, []string{"m4@shop"}},
		{"a domain's suffix is not the domain", mailquery.Filter{Recipient: "@ample.com"}, nil},
		{"unknown address", mailquery.Filter{Recipient: "nobody@example.com"}, nil},
		{"tenant", mailquery.Filter{Tenant: "acme"}, []string{"m5@shop", "m2@shop", "m1@shop"}},
		{"mail status", mailquery.Filter{State: "sent"}, []string{"m2@shop", "m1@shop"}},
		{"mail status only", mailquery.Filter{State: "retrying"}, []string{"m4@shop"}},
		{"recipient state", mailquery.Filter{State: "bounced"}, []string{"m1@shop"}},
		{"recipient state pending", mailquery.Filter{State: "pending"}, []string{"m4@shop"}},
		{"state of both", mailquery.Filter{State: "suppressed"}, []string{"m3@shop"}},
		{"failed mail", mailquery.Filter{State: "failed"}, []string{"m5@shop"}},
		{"reason: error class", mailquery.Filter{Reason: "throttled"}, []string{"m4@shop"}},
		{"reason: bounce type", mailquery.Filter{Reason: "hard"}, []string{"m1@shop"}},
		{"reason: bounce rule", mailquery.Filter{Reason: "user_unknown"}, []string{"m1@shop"}},
		{"since, inclusive", mailquery.Filter{Since: at(2)}, []string{"m5@shop", "m4@shop"}},
		{"until, exclusive", mailquery.Filter{Until: at(4)}, []string{"m1@shop"}},
		{"time range", mailquery.Filter{Since: at(4), Until: at(2)}, []string{"m3@shop", "m2@shop"}},
		{"combined", mailquery.Filter{Recipient: "@example.com", Tenant: "acme", State: "accepted"}, []string{"m2@shop", "m1@shop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := r.Find(t.Context(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(page); !slices.Equal(got, tt.want) {
				t.Errorf("Find(%+v) = %v, want %v", tt.f, got, tt.want)
			}
			if page.Next != "" {
				t.Errorf("Next = %q on the only page", page.Next)
			}
		})
	}

	t.Run("results carry the row and its recipients", func(t *testing.T) {
		page, err := r.Find(t.Context(), mailquery.Filter{MessageID: "m1@shop"})
		if err != nil || len(page.Mails) != 1 {
			t.Fatalf("Find = %+v, %v", page, err)
		}
		m := page.Mails[0]
		if m.Tenant != "acme" || m.Status != "sent" || m.Provider != "relay-a" || m.Stream != "transactional" ||
			!m.CreatedAt.Equal(at(5)) || m.SentAt.IsZero() || m.Attempt != 1 {
			t.Errorf("mail = %+v", m)
		}
		if len(m.Recipients) != 2 {
			t.Fatalf("recipients = %+v", m.Recipients)
		}
		a, b := m.Recipients[0], m.Recipients[1]
		if a.Index != 0 || a.Address != "Ada@Example.com" || a.State != "accepted" || a.AcceptedAt.IsZero() {
			t.Errorf("recipient 0 = %+v", a)
		}
		if b.Index != 1 || b.State != "bounced" || b.BounceType != "hard" || b.Code != 550 || b.Status != "5.1.1" ||
			b.Rule != "user_unknown" || b.Source != "" && b.Source != "smtp" {
			t.Errorf("recipient 1 = %+v", b)
		}
	})

	t.Run("invalid filters name the field", func(t *testing.T) {
		for field, f := range map[string]mailquery.Filter{
			"State": {State: "lost"}, "Cursor": {Cursor: "abc"}, "Since": {Since: at(1), Until: at(2)},
			"Limit": {Limit: mailquery.MaxLimit + 1}, "Recipient": {Recipient: "nobody"},
		} {
			_, err := r.Find(t.Context(), f)
			if !errors.Is(err, mailquery.ErrInvalidFilter) || !strings.Contains(err.Error(), field) {
				t.Errorf("Find(%+v) = %v, want ErrInvalidFilter naming %s", f, err, field)
			}
		}
	})
}

// TestFindPagesAreStable lists mail in pages, many of it created at the
// same instant, and checks that the pages together are the listing: each
// mail once, in order, also when mail is added between pages.
func TestFindPagesAreStable(t *testing.T) {
	pool := migrated(t)
	ctx := t.Context()
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var want []string
	// 23 mails at 4 instants: equal creation times span pages.
	for i := range 23 {
		id := fmt.Sprintf("page-%02d@x", i)
		created := base.Add(time.Duration(i%4) * time.Second)
		if _, err := pool.Exec(ctx, `INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, tenant, created_at)
			VALUES ($1, 'sent', 1, 1, '\x00', 'paged', $2)`, id, created); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO postline_recipients (message_id, idx, ref, address, state)
			VALUES ($1, 0, '\x00', $2, 'accepted')`, id, fmt.Sprintf("user%d@paged.example", i%3)); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	// Newest first, then by Message-ID, descending.
	slices.SortFunc(want, func(a, b string) int {
		var ia, ib int
		fmt.Sscanf(a, "page-%d@x", &ia)
		fmt.Sscanf(b, "page-%d@x", &ib)
		if c := (ib % 4) - (ia % 4); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	r := newReader(t, pool)

	for _, f := range []mailquery.Filter{{Tenant: "paged", Limit: 5}, {Recipient: "@PAGED.example", Limit: 4}} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			var got []string
			pages := 0
			for {
				page, err := r.Find(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				if len(page.Mails) > f.Limit {
					t.Fatalf("page of %d mails, limit %d", len(page.Mails), f.Limit)
				}
				got = append(got, ids(page)...)
				if page.Next == "" {
					break
				}
				if pages == 2 {
					// Mail added between pages, at a time the listing has
					// passed and at one it has not yet reached, does not
					// move what follows.
					for i, created := range []time.Time{base.Add(time.Hour), base.Add(-time.Hour)} {
						id := fmt.Sprintf("late-%d@x", i)
						if _, err := pool.Exec(ctx, `INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, tenant, created_at)
							VALUES ($1, 'sent', 1, 1, '\x00', 'other', $2)`, id, created); err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { _, _ = pool.Exec(ctx, `DELETE FROM postline_messages WHERE message_id = $1`, id) })
					}
				}
				f.Cursor = page.Next
			}
			if !slices.Equal(got, want) {
				t.Errorf("pages = %v\nwant    %v", got, want)
			}
			if wantPages := (len(want) + f.Limit - 1) / f.Limit; pages != wantPages {
				t.Errorf("%d pages, want %d", pages, wantPages)
			}
		})
	}

	t.Run("a cursor continues only its own listing", func(t *testing.T) {
		page, err := r.Find(ctx, mailquery.Filter{Tenant: "paged", Limit: 5})
		if err != nil || page.Next == "" {
			t.Fatalf("Find = %+v, %v", page, err)
		}
		_, err = r.Find(ctx, mailquery.Filter{Tenant: "other", Cursor: page.Next})
		if !errors.Is(err, mailquery.ErrInvalidFilter) || !strings.Contains(err.Error(), "Cursor") {
			t.Errorf("Find with another filter's cursor = %v, want an ErrInvalidFilter naming Cursor", err)
		}
		// The page size may change between pages.
		next, err := r.Find(ctx, mailquery.Filter{Tenant: "paged", Limit: 7, Cursor: page.Next})
		if err != nil || len(next.Mails) != 7 {
			t.Errorf("Find with another page size = %d mails, %v", len(next.Mails), err)
		}
	})
}

// TestFindByRecipientReadsOnUntilThePageIsCertain writes recipient rows
// long after their mails were created (a mail re-claimed after a crash, or
// rows that predate migration 0021 and carry its time), so that the rows
// written last are of the oldest mails: the first read of a recipient
// search holds none of the newest mails, and Find must read on. Every page
// is checked against the listing's order, for an address and a domain,
// and with an Until, which Find answers with a semi-join instead.
func TestFindByRecipientReadsOnUntilThePageIsCertain(t *testing.T) {
	pool := migrated(t)
	ctx := t.Context()
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	write := func(id string, created, written time.Time, addresses ...string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, created_at)
			VALUES ($1, 'sent', 1, 1, '\x00', $2)`, id, created); err != nil {
			t.Fatal(err)
		}
		for i, a := range addresses {
			if _, err := pool.Exec(ctx, `INSERT INTO postline_recipients (message_id, idx, ref, address, state, created_at)
				VALUES ($1, $2, '\x00', $3, 'accepted', $4)`, id, i, a, written); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want []string // newest first
	// Mail written as it was created, one a minute, some to two matching
	// recipients; the newest first in want.
	for i := 9; i >= 0; i-- {
		id := fmt.Sprintf("recent-%d@x", i)
		created := base.Add(time.Duration(i) * time.Minute)
		write(id, created, created.Add(time.Second), "Ada@Late.example", fmt.Sprintf("other%d@late.example", i%2))
		want = append(want, id)
	}
	// Older mail whose rows were written after all of the above.
	for i := 9; i >= 0; i-- {
		id := fmt.Sprintf("old-%d@x", i)
		created := base.Add(-time.Hour + time.Duration(i)*time.Minute)
		write(id, created, base.Add(time.Hour+time.Duration(i)*time.Second), "Ada@late.EXAMPLE")
		want = append(want, id)
	}
	// Not matching: another local part, another domain.
	write("ada-lower@x", base.Add(30*time.Minute), base.Add(31*time.Minute), "ada@late.example")
	write("elsewhere@x", base.Add(30*time.Minute), base.Add(31*time.Minute), "Ada@early.example")

	r := newReader(t, pool)
	for _, recipient := range []string{"Ada@LATE.example", "@late.example"} {
		for _, limit := range []int{1, 3, 50} {
			// Until the newest recent mail: a semi-join, not the walk.
			for _, until := range []time.Time{{}, base.Add(9 * time.Minute)} {
				t.Run(fmt.Sprintf("%s by %d until %v", recipient, limit, until), func(t *testing.T) {
					wantHere := want
					if recipient == "@late.example" {
						wantHere = slices.Insert(slices.Clone(want), 0, "ada-lower@x")
					}
					if !until.IsZero() {
						wantHere = slices.DeleteFunc(slices.Clone(wantHere), func(id string) bool {
							return id == "ada-lower@x" || id == "recent-9@x"
						})
					}
					f := mailquery.Filter{Recipient: recipient, Limit: limit, Until: until}
					var got []string
					for range len(wantHere) + 1 {
						page, err := r.Find(ctx, f)
						if err != nil {
							t.Fatal(err)
						}
						got = append(got, ids(page)...)
						if page.Next == "" {
							break
						}
						f.Cursor = page.Next
					}
					if !slices.Equal(got, wantHere) {
						t.Errorf("pages = %v\nwant    %v", got, wantHere)
					}
				})
			}
		}
	}
}
