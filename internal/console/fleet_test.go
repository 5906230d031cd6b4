package console

import (
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
)

// fleetAt is the time the fleet fakes were read at.
var fleetAt = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// sampleQueues is a jobs topic of two partitions, one held by a member,
// and two delay tiers.
func sampleQueues() fleet.Queues {
	return fleet.Queues{
		Workers: fleet.GroupLag{Group: "postline-worker", State: "Stable", Total: 42,
			Topics: []fleet.TopicLag{{Topic: "mail.jobs", Total: 42, Partitions: []fleet.PartitionLag{
				{Partition: 0, Lag: 40, Member: "worker-1@10.0.0.7"}, {Partition: 1, Lag: 2}}}},
			Members: []fleet.GroupMember{{MemberID: "m-1", ClientID: "worker-1", ClientHost: "/10.0.0.7", Assigned: map[string][]int{"mail.jobs": {0}}}}},
		Scheduler: &fleet.GroupLag{Group: "postline-retry-scheduler", State: "Stable", Total: 9},
		Tiers: []fleet.TierWaiting{{Tier: 5 * time.Second, Name: "5s", Topic: "mail.retry.5s", Waiting: 2},
			{Tier: 6 * time.Hour, Name: "6h", Topic: "mail.retry.6h", Waiting: 7}},
	}
}

// sampleRelays is an open relay with a live paced and a stale worker, a
// half-open one and a closed one without workers.
func sampleRelays() fleet.Relays {
	rate, share := 30.0, 15.0
	opened, until, probe := fleetAt.Add(-3*time.Minute), fleetAt.Add(27*time.Second), fleetAt.Add(10*time.Second)
	return fleet.Relays{At: fleetAt, StaleAfterSeconds: 6, Relays: []fleet.Relay{
		{Name: "mx-main", Breaker: &fleet.Breaker{State: "open", Since: &opened, OpenUntil: &until, LastClass: "connection_refused", Failures: 5},
			FleetRate: 30, Live: 1, Paced: 1, Workers: []fleet.WorkerControl{
				{WorkerID: "worker-a", Rate: &rate, FleetShare: &share, Members: 2, Limit: 5, InFlight: 2, UpdatedAt: fleetAt.Add(-time.Second),
					LastCut: &fleet.Cut{Controller: "rate", Reason: "421 4.7.0 slow down", At: fleetAt.Add(-time.Minute)}},
				{WorkerID: "worker-gone", Stale: true, Limit: 1, UpdatedAt: fleetAt.Add(-time.Hour)},
			}},
		{Name: "mx-spare", Breaker: &fleet.Breaker{State: "half_open", Since: &opened, ProbeOwner: "worker-b", ProbeUntil: &probe},
			Live: 1, Workers: []fleet.WorkerControl{{WorkerID: "worker-b", Limit: 16, UpdatedAt: fleetAt}}},
		{Name: "mx-old", Breaker: &fleet.Breaker{State: "closed", Failures: 1, LastClass: "timeout"}, Workers: []fleet.WorkerControl{}},
	}}
}

// sampleLetters are dead letters of 2026-12-01 between 00:00 and 03:00.
func sampleLetters() []redrive.DeadLetter {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return []redrive.DeadLetter{
		{Time: day.Add(10 * time.Minute), Reason: "smtp_permanent"},
		{Time: day.Add(20 * time.Minute), Reason: "smtp_permanent"},
		{Time: day.Add(70 * time.Minute), Reason: "max_attempts"},
		{Time: day.Add(150 * time.Minute)},
	}
}

// fleetServer is a unit server reading f (none when nil).
func fleetServer(t *testing.T, f *fakeFleet) (*Server, *fakeAudit) {
	t.Helper()
	audit := &fakeAudit{}
	cfg := Config{
		Accounts: &fakeAccounts{sessions: map[string]operator.Session{
			"viewer-token":   {Operator: "vic", Role: operator.RoleViewer, CSRF: "vic-csrf"},
			"operator-token": {Operator: "olga", Role: operator.RoleOperator, CSRF: "olga-csrf"},
		}},
		Audit: audit, Suppressions: &fakeSuppressions{entries: []suppression.Entry{}},
	}
	if f != nil {
		cfg.Fleet = f
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, audit
}

const threeHours = "/queues?since=2026-12-01T00:00&until=2026-12-01T03:00&bucket=1h"

func TestFleetPagesRenderTheirStates(t *testing.T) {
	full := func() *fakeFleet {
		return &fakeFleet{queues: sampleQueues(), relays: sampleRelays(), letters: sampleLetters()}
	}
	kafkaDown := errors.New("dial tcp 127.0.0.1:9092: connection refused")
	tests := []struct {
		name       string
		fleet      *fakeFleet
		path       string
		token      string
		wantStatus int
		want, not  []string
	}{
		{name: "signed out to login", fleet: full(), path: "/queues", wantStatus: 303},
		{name: "queues for a viewer", fleet: full(), path: threeHours, token: "viewer-token", wantStatus: 200,
			want: []string{`aria-current="page">Queues</a>`, "<code>postline-worker</code> (Stable): <strong>42</strong>", "1 member.",
				`<td>0</td><td class="n">40</td><td>worker-1@10.0.0.7</td>`, `<td>1</td><td class="n">2</td><td>-</td>`,
				`<th scope="row">Total</th><td class="n">42</td>`, "<code>postline-retry-scheduler</code>",
				`<td>5s</td><td>mail.retry.5s</td><td class="n">2</td>`, `<td>6h</td><td>mail.retry.6h</td><td class="n">7</td>`,
				"<strong>4</strong> dead letters from", `<time datetime="2026-12-01T00:00:00Z">`, `<time datetime="2026-12-01T03:00:00Z">`,
				`href="/deadletters?list=1&amp;reason=smtp_permanent&amp;since=2026-12-01T00%3A00%3A00Z&amp;until=2026-12-01T03%3A00%3A00Z"`,
				">smtp_permanent</a>: 2", "(no reason): 1", `class="bar w20"`, `class="bar w10"`, `value="1h"`},
			not: []string{"reason=&amp;"}},
		{name: "queues with nothing waiting", fleet: &fakeFleet{queues: fleet.Queues{Workers: fleet.GroupLag{Group: "g", Topics: []fleet.TopicLag{
			{Topic: "mail.jobs", Partitions: []fleet.PartitionLag{{Partition: 0}}}}}}}, path: "/queues", token: "viewer-token", wantStatus: 200,
			want: []string{"<code>g</code> (-): <strong>0</strong>", "No retry tiers are configured", "No dead letter in this window",
				`value="24h"`, `class="bar w0"`}},
		{name: "queues while Kafka is away", fleet: &fakeFleet{queuesErr: &fleet.GroupLagError{Group: "postline-worker", Err: kafkaDown},
			histogErr: kafkaDown}, path: "/queues", token: "viewer-token", wantStatus: 503,
			want: []string{`role="alert">The console could not read the lag of the workers&#39; group postline-worker`, "POSTLINE_CONSUMER_GROUP",
				"Check that Kafka answers (postctl status)", "could not read the dead-letter topic (POSTLINE_DLQ_TOPIC)", "Not read: see above"},
			not: []string{"connection refused", "goroutine", "<table"}},
		{name: "only the scheduler's group failed", fleet: &fakeFleet{queues: fleet.Queues{Workers: sampleQueues().Workers},
			queuesErr: &fleet.GroupLagError{Group: "postline-retry-scheduler", Scheduler: true, Err: kafkaDown}}, path: "/queues",
			token: "viewer-token", wantStatus: 503,
			want: []string{"worker-1@10.0.0.7", "retry scheduler&#39;s group postline-retry-scheduler", "POSTLINE_RETRY_TIERS"},
			not:  []string{"No retry tiers are configured"}},
		{name: "a window that is not one", fleet: full(), path: "/queues?since=yesterday", token: "viewer-token", wantStatus: 400,
			want: []string{`role="alert">Since &#34;yesterday&#34; is not a time`, "shown once the window above is corrected", "worker-1@10.0.0.7"}},
		{name: "too many buckets", fleet: full(), path: "/queues?since=30d&bucket=1m", token: "viewer-token", wantStatus: 400,
			want: []string{"buckets of 1m: at most 500"}},
		{name: "a bucket too small", fleet: full(), path: "/queues?bucket=1s", token: "viewer-token", wantStatus: 400,
			want: []string{`Bucket &#34;1s&#34; is not a bucket size`}},
		{name: "queues without the fleet", path: "/queues", token: "viewer-token", wantStatus: 503, want: []string{"postctl lag"},
			not: []string{"<h2>"}},
		{name: "relays for a viewer", fleet: full(), path: "/relays", token: "viewer-token", wantStatus: 200,
			want: []string{`aria-current="page">Relays</a>`, "Relay mx-main", `<span class="state">open</span>`,
				`<dt>Open since</dt><dd><time datetime="2026-12-05T11:57:00Z">`, "(3m0s ago)", "Opened on</dt><dd>connection_refused",
				`<dt>Next probe</dt><dd><time datetime="2026-12-05T12:00:27Z">2026-12-05 12:00:27 UTC</time> (in 27s)`,
				"30.0/s learned (1 of 1 live worker paced)", `<td>worker-a</td><td><span class="state">paced</span></td>`, "<td>30.0/s</td>",
				"15.0/s of 2 workers", "rate at <time", "421 4.7.0 slow down",
				`<td>worker-gone</td><td><span class="state">stale</span></td>`, "(1h0m0s ago)",
				`<span class="state">half-open</span>`, "by worker-b until <time", `<span class="state">unpaced</span>`, "unpaced (1 live worker)",
				`<span class="state">closed</span>`, "Last fault</dt><dd>timeout", "no live worker", "No worker has published its send control of this relay"}},
		{name: "no relays yet", fleet: &fakeFleet{relays: fleet.Relays{At: fleetAt, Relays: []fleet.Relay{}}}, path: "/relays",
			token: "viewer-token", wantStatus: 200, want: []string{"No relays: no worker has published"}},
		{name: "relays on a database not migrated", fleet: &fakeFleet{relaysErr: &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}},
			path: "/relays", token: "viewer-token", wantStatus: 503, want: []string{"apply the migrations (postctl migrate"},
			not: []string{"relation does not exist", "<table"}},
		{name: "relays while PostgreSQL is away", fleet: &fakeFleet{relaysErr: errors.New("connection refused")}, path: "/relays",
			token: "viewer-token", wantStatus: 503, want: []string{"could not read the relays from PostgreSQL"}},
		{name: "relays without the fleet", path: "/relays", token: "viewer-token", wantStatus: 503, want: []string{"postctl relays"}},
		{name: "API queues", fleet: full(), path: "/api/v1/queues", token: "viewer-token", wantStatus: 200,
			want: []string{`"group":"postline-worker"`, `"partitions":[{"partition":0,"lag":40,"member":"worker-1@10.0.0.7"}`,
				`"tiers":[{"tier":"5s","topic":"mail.retry.5s","waiting":2}`}},
		{name: "API queues while Kafka is away", fleet: &fakeFleet{queuesErr: kafkaDown}, path: "/api/v1/queues", token: "viewer-token",
			wantStatus: 503, want: []string{`"error":"The console could not read the queues from Kafka`}, not: []string{"connection refused"}},
		{name: "API histogram", fleet: full(), path: "/api/v1/deadletters/histogram?since=2026-12-01T00:00&until=2026-12-01T03:00",
			token: "viewer-token", wantStatus: 200,
			want: []string{`"total":4`, `"bucket_seconds":3600`, `{"reason":"smtp_permanent","count":2}`, `"by_reason":{"smtp_permanent":2}`}},
		{name: "API histogram with a bad bucket", fleet: full(), path: "/api/v1/deadletters/histogram?bucket=soon", token: "viewer-token",
			wantStatus: 400, want: []string{`"error":"Bucket`}},
		{name: "API relays", fleet: full(), path: "/api/v1/relays", token: "viewer-token", wantStatus: 200,
			want: []string{`"name":"mx-main"`, `"state":"half_open"`, `"stale":true`, `"rate":30`, `"fleet_rate":30`}},
		{name: "API relays signed out", fleet: full(), path: "/api/v1/relays", wantStatus: 401},
		{name: "API without the fleet", path: "/api/v1/relays", token: "viewer-token", wantStatus: 503, want: []string{"not available"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := fleetServer(t, tt.fleet)
			w := get(t, s, tt.path, tt.token)
			body := w.Body.String()
			if w.Code != tt.wantStatus {
				t.Fatalf("GET %s = %d, want %d: %s", tt.path, w.Code, tt.wantStatus, body)
			}
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s lacks %q:\n%s", tt.path, want, body)
				}
			}
			for _, not := range tt.not {
				if strings.Contains(body, not) {
					t.Errorf("GET %s has %q:\n%s", tt.path, not, body)
				}
			}
			if strings.Contains(body, "<no value>") || strings.Contains(body, "viewer-token") {
				t.Errorf("GET %s shows a missing value or a session token", tt.path)
			}
		})
	}
}

// The histogram table has a row per bucket, empty ones too, and the page's
// default window is the last 24 hours by hour.
func TestHistogramTableRowPerBucket(t *testing.T) {
	tests := []struct {
		path  string
		rows  int
		since time.Duration // before now, for the default window
	}{
		{path: threeHours, rows: 3},
		{path: "/queues?since=2026-12-01T00:00&until=2026-12-01T03:00&bucket=30m", rows: 6},
		{path: "/queues?since=2026-12-01T00:30&until=2026-12-02&bucket=1d", rows: 1},
		{path: "/queues?since=2026-12-01T00:30&until=2026-12-01T02:10&bucket=1h", rows: 3},
		{path: "/queues", since: 24 * time.Hour},
	}
	for _, tt := range tests {
		f := &fakeFleet{queues: sampleQueues(), letters: sampleLetters()}
		s, _ := fleetServer(t, f)
		before := time.Now()
		w := get(t, s, tt.path, "viewer-token")
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s = %d: %s", tt.path, w.Code, w.Body)
		}
		if len(f.asked) != 1 {
			t.Fatalf("GET %s asked %d histograms", tt.path, len(f.asked))
		}
		q := f.asked[0]
		if tt.since != 0 {
			if q.Bucket != time.Hour || q.Until.Before(before) || q.Until.Sub(q.Since) != tt.since {
				t.Errorf("default window %+v, want the last 24 h by 1 h", q)
			}
			// 24 h not on the hour spans 25 buckets, on the hour 24.
			tt.rows = 0
			for start := q.Since.Truncate(time.Hour); start.Before(q.Until); start = start.Add(time.Hour) {
				tt.rows++
			}
		}
		if got := strings.Count(w.Body.String(), `<tr class="bucket">`); got != tt.rows {
			t.Errorf("GET %s: %d bucket rows, want %d", tt.path, got, tt.rows)
		}
	}
}

// Viewers read both pages and their API twins; each read is audited
// before it is shown, as the search and mail pages are.
func TestFleetReadsAreAudited(t *testing.T) {
	f := &fakeFleet{queues: sampleQueues(), relays: sampleRelays(), letters: sampleLetters()}
	s, audit := fleetServer(t, f)
	for _, path := range []string{"/queues", "/relays", "/api/v1/queues", "/api/v1/relays", "/api/v1/deadletters/histogram"} {
		if w := get(t, s, path, "viewer-token"); w.Code != http.StatusOK {
			t.Fatalf("viewer GET %s = %d: %s", path, w.Code, w.Body)
		}
	}
	want := []string{"queues.view:ok", "relays.view:ok", "api.queues:ok", "api.relays:ok", "api.deadletters.histogram:ok"}
	if got := audit.results(); !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
	for _, e := range audit.entries {
		if e.Actor != "vic" {
			t.Errorf("entry %+v, want by vic", e)
		}
	}
}

func TestParseHistogramQuery(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 34, 0, 0, time.UTC)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		query   string
		want    fleet.HistogramQuery
		wantErr string
	}{
		{name: "defaults", query: "", want: fleet.HistogramQuery{Since: now.Add(-24 * time.Hour), Until: now, Bucket: time.Hour}},
		{name: "a day by 10 minutes", query: "since=2026-12-01&until=2026-12-02&bucket=10m",
			want: fleet.HistogramQuery{Since: day, Until: day.Add(24 * time.Hour), Bucket: 10 * time.Minute}},
		{name: "a week by day", query: "since=7d&bucket=1d", want: fleet.HistogramQuery{Since: now.Add(-7 * 24 * time.Hour), Until: now, Bucket: 24 * time.Hour}},
		{name: "RFC 3339", query: "since=2026-12-01T01:00:00%2B01:00&until=2026-12-01T06:00:00Z",
			want: fleet.HistogramQuery{Since: day, Until: day.Add(6 * time.Hour), Bucket: time.Hour}},
		{name: "since after until", query: "since=2026-12-02&until=2026-12-01", wantErr: "Since must be before Until"},
		{name: "since in the future", query: "since=2027-01-01", wantErr: "Since must be before Until"},
		{name: "not a time", query: "until=tomorrow", wantErr: "Until"},
		{name: "not a bucket", query: "bucket=hourly", wantErr: "Bucket"},
		{name: "a bucket of seconds", query: "bucket=30s", wantErr: "at least 1m"},
		{name: "a negative bucket", query: "bucket=-1h", wantErr: "Bucket"},
		{name: "zero days", query: "bucket=0d", wantErr: "Bucket"},
		{name: "501 buckets", query: "since=2026-12-01T00:00&until=2026-12-01T08:21&bucket=1m", wantErr: "501 buckets"},
		{name: "500 buckets", query: "since=2026-12-01T00:00&until=2026-12-01T08:20&bucket=1m",
			want: fleet.HistogramQuery{Since: day, Until: day.Add(500 * time.Minute), Bucket: time.Minute}},
		{name: "a long field", query: "since=" + strings.Repeat("1", 100), wantErr: "Since is 100 bytes"},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseHistogramQuery(readHistogramForm(q), now, maxPageBuckets)
		if tt.wantErr != "" {
			if _, ok := err.(inputError); !ok || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want an inputError about %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !got.Since.Equal(tt.want.Since) || !got.Until.Equal(tt.want.Until) || got.Bucket != tt.want.Bucket {
			t.Errorf("%s: %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// FuzzParseHistogramQuery: any form is refused with an inputError, or is
// a window fleet takes (since before until, a bucket of a minute or more,
// at most maxPageBuckets buckets) whose audited, absolute form reads back
// as the same window later too: the dead letters links keep the window.
func FuzzParseHistogramQuery(f *testing.F) {
	now := time.Date(2026, 12, 5, 12, 34, 56, 789, time.UTC)
	f.Add("24h", "", "1h")
	f.Add("2026-12-01T00:00", "2026-12-02", "10m")
	f.Add("7d", "1d", "1d")
	f.Add("2026-12-01T01:00:00.5+01:00", "", "90m")
	f.Fuzz(func(t *testing.T, since, until, bucket string) {
		form := histogramForm{Since: since, Until: until, Bucket: bucket}
		q, err := parseHistogramQuery(form, now, maxPageBuckets)
		if err != nil {
			if _, ok := err.(inputError); !ok {
				t.Fatalf("parseHistogramQuery(%+v) failed with %T, not an inputError", form, err)
			}
			return
		}
		first := q.Since.Truncate(q.Bucket)
		if !q.Since.Before(q.Until) || q.Bucket < minHistogramBucket || (q.Until.Sub(first)+q.Bucket-1)/q.Bucket > maxPageBuckets {
			t.Fatalf("parseHistogramQuery(%+v) = %+v: not a window fleet takes", form, q)
		}
		w := window(q, bucket)
		back, err := parseHistogramQuery(histogramForm{Since: w.Since, Until: w.Until, Bucket: w.Bucket}, now.Add(time.Hour), maxPageBuckets)
		if err != nil || !back.Since.Equal(q.Since) || !back.Until.Equal(q.Until) || back.Bucket != q.Bucket {
			t.Fatalf("parseHistogramQuery(%+v) = %+v; its absolute form %+v reads back as %+v, %v", form, q, w, back, err)
		}
	})
}

func TestBarClass(t *testing.T) {
	tests := []struct {
		n, fullest int
		want       string
	}{
		{0, 0, "bar w0"}, {0, 10, "bar w0"}, {10, 10, "bar w20"}, {5, 10, "bar w10"}, {1, 1000, "bar w1"}, {26, 100, "bar w5"}, {1, 3, "bar w7"},
	}
	for _, tt := range tests {
		if got := barClass(tt.n, tt.fullest); got != tt.want {
			t.Errorf("barClass(%d, %d) = %q, want %q", tt.n, tt.fullest, got, tt.want)
		}
	}
}
