package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/relaystate"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

var relaysAt = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// relaysFixture: relay "primary" (priority 1) has an open breaker and three
// workers: w1 paced with a rate cut, w2 unpaced and never cut, w3 stale
// with a high rate; "backup" (priority 2) has a closed breaker that counted
// a fault and one worker sharing a fleet rate; "old" has a breaker and no
// worker; "new" has a worker and no breaker row.
func relaysFixture() (relaystate.Listing, []fleet.BreakerRow) {
	inf := math.Inf(1)
	l := relaystate.Listing{At: relaysAt, Rows: []relaystate.Row{
		{WorkerID: "w1", UpdatedAt: relaysAt.Add(-time.Second), Snapshot: relaystate.Snapshot{Relay: "primary", Priority: 1,
			Limit: 6, InFlight: 4, Rate: 42.25, FleetShare: inf, ConcurrencyCuts: 1, RateCuts: 3,
			LastCut: relaystate.Cut{Controller: "rate", Reason: "throttle 450", At: relaysAt.Add(-5 * time.Second)}}},
		{WorkerID: "w2", UpdatedAt: relaysAt.Add(-2 * time.Second), Snapshot: relaystate.Snapshot{Relay: "primary", Priority: 1,
			Limit: 16, Rate: inf, FleetShare: inf}},
		{WorkerID: "w3", UpdatedAt: relaysAt.Add(-time.Minute), Snapshot: relaystate.Snapshot{Relay: "primary", Priority: 1,
			Limit: 2, Rate: 500, FleetShare: inf}},
		{WorkerID: "w1", UpdatedAt: relaysAt.Add(-time.Second), Snapshot: relaystate.Snapshot{Relay: "backup", Priority: 2,
			Limit: 8, InFlight: 1, Rate: 10, FleetShare: 25, Members: 2}},
		{WorkerID: "w1", UpdatedAt: relaysAt.Add(-time.Second), Snapshot: relaystate.Snapshot{Relay: "new", Priority: 3,
			Limit: 1, Rate: inf, FleetShare: inf}},
	}}
	breakers := []fleet.BreakerRow{
		{Provider: "backup", State: "closed", Failures: 2, LastClass: "connection_refused"},
		{Provider: "old", State: "closed"},
		{Provider: "primary", State: "open", Failures: 5, OpenedAt: relaysAt.Add(-20 * time.Second),
			OpenUntil: relaysAt.Add(10 * time.Second), LastClass: "timeout"},
	}
	return l, breakers
}

func TestRelaysText(t *testing.T) {
	l, breakers := relaysFixture()
	tests := []struct {
		name     string
		listing  relaystate.Listing
		breakers []fleet.BreakerRow
		want     string
	}{
		{"fleet", l, breakers, `relay primary: breaker open since 2026-12-01T11:59:40Z (20s ago), opened on timeout, probe in 10s; fleet learned rate 42.2/s (1 of 2 live workers paced)
WORKER  PRIORITY  LIMIT  IN_FLIGHT  RATE     FLEET_SHARE  CUTS                   LAST_CUT                   UPDATED
w1      1         6      4          42.2/s   none         concurrency 1, rate 3  rate 5s ago: throttle 450  1s ago
w2      1         16     0          unpaced  none         concurrency 0, rate 0  -                          2s ago
w3      1         2      0          500.0/s  none         concurrency 0, rate 0  -                          1m0s ago (stale)

relay backup: breaker closed, 2 faults counted, last fault connection_refused; fleet learned rate 10.0/s (1 of 1 live worker paced)
WORKER  PRIORITY  LIMIT  IN_FLIGHT  RATE    FLEET_SHARE  CUTS                   LAST_CUT  UPDATED
w1      2         8      1          10.0/s  25.0/s of 2  concurrency 0, rate 0  -         1s ago

relay new: breaker unknown (no row in postline_circuits); fleet unpaced (1 live worker)
WORKER  PRIORITY  LIMIT  IN_FLIGHT  RATE     FLEET_SHARE  CUTS                   LAST_CUT  UPDATED
w1      3         1      0          unpaced  none         concurrency 0, rate 0  -         1s ago

relay old: breaker closed; no live worker
`},
		{"half-open, workers all stale", relaystate.Listing{At: relaysAt, Rows: l.Rows[2:3]},
			[]fleet.BreakerRow{{Provider: "primary", State: "half_open", Failures: 6, OpenedAt: relaysAt.Add(-90 * time.Second),
				OpenUntil: relaysAt.Add(-30 * time.Second), ProbeOwner: "w2", ProbeUntil: relaysAt.Add(5 * time.Second), LastClass: "timeout"}},
			`relay primary: breaker half-open since 2026-12-01T11:58:30Z (1m30s ago), opened on timeout, probe by w2; no live worker
WORKER  PRIORITY  LIMIT  IN_FLIGHT  RATE     FLEET_SHARE  CUTS                   LAST_CUT  UPDATED
w3      1         2      0          500.0/s  none         concurrency 0, rate 0  -         1m0s ago (stale)
`},
		{"nothing", relaystate.Listing{At: relaysAt}, nil,
			"no relays: no worker has published its relay state, and postline_circuits is empty\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &globals{stdout: &out, output: "text"}
			rep := fleet.NewRelays(tt.listing, tt.breakers, fleet.DefaultStaleAfter)
			if err := printReport(g, rep, func() error { return writeRelays(g, rep) }); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRelaysJSON(t *testing.T) {
	l, breakers := relaysFixture()
	var out bytes.Buffer
	g := &globals{stdout: &out, output: "json"}
	rep := fleet.NewRelays(l, breakers, fleet.DefaultStaleAfter)
	if err := printReport(g, rep, func() error { t.Fatal("text output with -o json"); return nil }); err != nil {
		t.Fatal(err)
	}
	// Decoded generically: the shape the help promises, nulls included.
	var got struct {
		At         time.Time `json:"at"`
		StaleAfter float64   `json:"stale_after_seconds"`
		Relays     []struct {
			Name    string                     `json:"name"`
			Breaker map[string]json.RawMessage `json:"breaker"`
			Fleet   float64                    `json:"fleet_rate"`
			Live    int                        `json:"live_workers"`
			Paced   int                        `json:"paced_workers"`
			Workers []map[string]json.RawMessage
		} `json:"relays"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output %s: %v", out.String(), err)
	}
	if !got.At.Equal(relaysAt) || got.StaleAfter != 6 || len(got.Relays) != 4 {
		t.Fatalf("report %s", out.String())
	}
	var names []string
	for _, r := range got.Relays {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "primary backup new old" {
		t.Errorf("relays in order %v, want by priority, then the relay without workers", names)
	}
	primary, backup, fresh, old := got.Relays[0], got.Relays[1], got.Relays[2], got.Relays[3]
	tests := []struct {
		what      string
		got, want string
	}{
		{"primary breaker state", string(primary.Breaker["state"]), `"open"`},
		{"primary breaker since", string(primary.Breaker["since"]), `"2026-12-01T11:59:40Z"`},
		{"primary breaker last class", string(primary.Breaker["last_class"]), `"timeout"`},
		{"backup breaker since (closed)", string(backup.Breaker["since"]), ""},
		{"new breaker (no row)", string(mustJSON(t, fresh.Breaker)), "null"},
		{"w1 rate", string(primary.Workers[0]["rate"]), "42.25"},
		{"w1 fleet share", string(primary.Workers[0]["fleet_share"]), "null"},
		{"w1 last cut", string(primary.Workers[0]["last_cut"]), `{"controller":"rate","reason":"throttle 450","at":"2026-12-01T11:59:55Z"}`},
		{"w2 rate (unpaced)", string(primary.Workers[1]["rate"]), "null"},
		{"w2 last cut (never)", string(primary.Workers[1]["last_cut"]), ""},
		{"w3 stale", string(primary.Workers[2]["stale"]), "true"},
		{"w3 age", string(primary.Workers[2]["age_seconds"]), "60"},
		{"backup fleet share", string(backup.Workers[0]["fleet_share"]), "25"},
		{"backup members", string(backup.Workers[0]["members"]), "2"},
		{"old workers", string(mustJSON(t, old.Workers)), "[]"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %s, want %s", tt.what, tt.got, tt.want)
		}
	}
	// The stale worker's 500/s is not in the fleet's rate.
	if primary.Fleet != 42.25 || primary.Live != 2 || primary.Paced != 1 {
		t.Errorf("primary fleet rate %v over %d live, %d paced; want 42.25 over 2 live, 1 paced", primary.Fleet, primary.Live, primary.Paced)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRelaysStaleAfterFlag(t *testing.T) {
	env := map[string]string{"POSTLINE_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"}
	_, _, err := postctl(t, env, "", "relays", "--stale-after", "0s")
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--stale-after") {
		t.Errorf("--stale-after 0s: %v, want a usage error", err)
	}
}

// TestRelaysPostgres publishes two workers' relay states into a migrated
// schema, opens one relay's breaker, and checks what postctl relays prints.
func TestRelaysPostgres(t *testing.T) {
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := relaystate.New(pool)
	now := time.Now()
	cut := relaystate.Cut{Controller: adaptive.ControllerRate, Reason: "throttle 450", At: now.Add(-time.Second)}
	if err := store.Publish(ctx, "worker-a", now, []relaystate.Snapshot{
		{Relay: "mx-main", Priority: 1, Limit: 5, InFlight: 2, Rate: 30, FleetShare: math.Inf(1), RateCuts: 1, LastCut: cut},
		{Relay: "mx-spare", Priority: 2, Limit: 16, Rate: math.Inf(1), FleetShare: math.Inf(1)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Publish(ctx, "worker-b", now, []relaystate.Snapshot{
		{Relay: "mx-main", Priority: 1, Limit: 7, Rate: 20.5, FleetShare: math.Inf(1)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO postline_circuits (provider, state, failures, cooldown, opened_at, open_until, last_class)
		VALUES ('mx-main', 'closed', 0, '30s', NULL, NULL, NULL),
		       ('mx-spare', 'open', 5, '30s', now() - interval '3 seconds', now() + interval '27 seconds', 'connection_refused')`); err != nil {
		t.Fatal(err)
	}

	out, _, err := postctl(t, nil, "", "--database-url", url, "relays")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"relay mx-main: breaker closed; fleet learned rate 50.5/s (2 of 2 live workers paced)",
		"relay mx-spare: breaker open since ",
		"opened on connection_refused, probe in ",
		"rate 1s ago: throttle 450",
		"unpaced",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "relay mx-main") > strings.Index(out, "relay mx-spare") {
		t.Errorf("mx-spare (priority 2) before mx-main:\n%s", out)
	}

	out, _, err = postctl(t, nil, "", "--database-url", url, "-o", "json", "relays")
	if err != nil {
		t.Fatal(err)
	}
	var rep fleet.Relays
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if len(rep.Relays) != 2 || rep.Relays[0].Name != "mx-main" || len(rep.Relays[0].Workers) != 2 ||
		rep.Relays[0].Workers[0].Rate == nil || *rep.Relays[0].Workers[0].Rate != 30 ||
		rep.Relays[1].Breaker == nil || rep.Relays[1].Breaker.State != "open" || rep.Relays[1].Workers[0].Rate != nil {
		t.Errorf("json report %s", out)
	}

	// A database never migrated to this version says what to do.
	bare, _ := testenv.NewSchema(t)
	_, _, err = postctl(t, nil, "", "--database-url", bare, "relays")
	if err == nil || !strings.Contains(err.Error(), "postctl migrate") {
		t.Errorf("relays on an unmigrated schema: %v, want the migrate hint", err)
	}
}
