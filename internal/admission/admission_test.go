package admission_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/admission"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// step is one call on a limiter: admit a unit for client (want the error
// want), or free the n-th unit admitted so far.
type step struct {
	admit string
	want  error
	free  int // index into the units admitted, when admit is ""
}

func TestLimiter(t *testing.T) {
	tests := []struct {
		name      string
		max, per  int
		steps     []step
		wantOpen  int
		wantTotal float64 // refused_total{reason=total}
		wantPer   float64 // refused_total{reason=per_client}
	}{
		{
			name: "total limit", max: 2,
			steps:    []step{{admit: "a"}, {admit: "b"}, {admit: "c", want: admission.ErrFull}},
			wantOpen: 2, wantTotal: 1,
		},
		{
			name: "per client limit", max: 3, per: 1,
			steps:    []step{{admit: "a"}, {admit: "a", want: admission.ErrClientFull}, {admit: "b"}},
			wantOpen: 2, wantPer: 1,
		},
		{
			name: "total is checked before the client's count", max: 2, per: 1,
			steps:    []step{{admit: "a"}, {admit: "b"}, {admit: "a", want: admission.ErrFull}},
			wantOpen: 2, wantTotal: 1,
		},
		{
			name: "a free frees a total slot", max: 1,
			steps:    []step{{admit: "a"}, {admit: "b", want: admission.ErrFull}, {free: 0}, {admit: "b"}},
			wantOpen: 1, wantTotal: 1,
		},
		{
			name: "a free frees the client's slot", max: 4, per: 2,
			steps: []step{{admit: "a"}, {admit: "a"}, {admit: "a", want: admission.ErrClientFull},
				{free: 1}, {admit: "a"}, {admit: "a", want: admission.ErrClientFull}},
			wantOpen: 2, wantPer: 2,
		},
		{
			name: "freeing twice counts once", max: 2,
			steps:    []step{{admit: "a"}, {admit: "b"}, {free: 0}, {free: 0}, {admit: "c"}, {admit: "d", want: admission.ErrFull}},
			wantOpen: 2, wantTotal: 1,
		},
		{
			name: "per client defaults to max", max: 3,
			steps:    []step{{admit: "a"}, {admit: "a"}, {admit: "a"}, {admit: "a", want: admission.ErrFull}},
			wantOpen: 3, wantTotal: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			l, err := admission.New(admission.Config{Name: "test", Max: tt.max, MaxPerClient: tt.per}, reg)
			if err != nil {
				t.Fatal(err)
			}
			var units []func()
			for i, s := range tt.steps {
				if s.admit == "" {
					units[s.free]()
					continue
				}
				free, err := l.Admit(s.admit)
				if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
					t.Fatalf("step %d: Admit(%q) = %v, want %v", i, s.admit, err, s.want)
				}
				if (free == nil) != (err != nil) {
					t.Fatalf("step %d: Admit(%q) returned free %v with error %v", i, s.admit, free != nil, err)
				}
				if free != nil {
					units = append(units, free)
				}
			}
			if open, _ := l.Open(""); open != tt.wantOpen {
				t.Errorf("Open = %d, want %d", open, tt.wantOpen)
			}
			if got := gauge(t, reg, "test"); got != float64(tt.wantOpen) {
				t.Errorf("postline_admission_open = %v, want %d", got, tt.wantOpen)
			}
			if got := refused(t, reg, "test", admission.ReasonTotal); got != tt.wantTotal {
				t.Errorf("refused{reason=total} = %v, want %v", got, tt.wantTotal)
			}
			if got := refused(t, reg, "test", admission.ReasonPerClient); got != tt.wantPer {
				t.Errorf("refused{reason=per_client} = %v, want %v", got, tt.wantPer)
			}
			// Freeing everything leaves nothing counted, for any client.
			for _, r := range units {
				r()
			}
			for _, c := range []string{"a", "b", "c", "d"} {
				if total, of := l.Open(c); total != 0 || of != 0 {
					t.Errorf("after every free Open(%q) = %d, %d; want 0, 0", c, total, of)
				}
			}
		})
	}
}

// TestLimiterConcurrent admits and frees from many goroutines: the
// counts never pass the limits and end at zero.
func TestLimiterConcurrent(t *testing.T) {
	l, err := admission.New(admission.Config{Name: "test", Max: 5, MaxPerClient: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		client := fmt.Sprintf("c%d", g%4)
		wg.Go(func() {
			for range 500 {
				free, err := l.Admit(client)
				if err != nil {
					continue
				}
				if total, of := l.Open(client); total > 5 || of > 2 {
					select {
					case errs <- fmt.Errorf("open %d total, %d for %s: over the limits", total, of, client):
					default:
					}
				}
				free()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if total, _ := l.Open(""); total != 0 {
		t.Errorf("Open = %d after every free, want 0", total)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  admission.Config
		want string
	}{
		{admission.Config{Max: 1}, "Name"},
		{admission.Config{Name: "x"}, "Max"},
		{admission.Config{Name: "x", Max: 2, MaxPerClient: 3}, "MaxPerClient"},
		{admission.Config{Name: "x", Max: 2, MaxPerClient: -1}, "MaxPerClient"},
	}
	for _, tt := range tests {
		_, err := admission.New(tt.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}

func TestClient(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:25", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:25", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:25", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:2525", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:25", "fe80::/64"},
		{"@", "@"}, // a unix socket's address
	}
	for _, tt := range tests {
		if got := admission.Client(tt.remote); got != tt.want {
			t.Errorf("Client(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

// TestListener: connections over the limit reach refuse and are closed;
// closing an admitted one frees its slot for the next.
func TestListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := admission.New(admission.Config{Name: "conns", Max: 2}, reg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(raw, func(c net.Conn, err error) {
		_, _ = fmt.Fprintf(c, "refused: %v\n", err)
	})

	accepted := make(chan net.Conn)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, "welcome")
			accepted <- c
		}
	})
	defer wg.Wait()
	defer ln.Close()

	dial := func() (net.Conn, string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("read the first line: %v", err)
		}
		return c, strings.TrimSpace(line)
	}
	c1, got := dial()
	s1 := <-accepted
	if got != "welcome" {
		t.Fatalf("first connection: %q", got)
	}
	c2, _ := dial()
	s2 := <-accepted
	c3, got := dial()
	if !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, admission.ErrFull.Error()) {
		t.Errorf("third connection: %q, want a refusal with ErrFull", got)
	}
	// The refused connection is closed by the server.
	if _, err := c3.Read(make([]byte, 1)); err == nil {
		t.Error("the refused connection is still open")
	}
	_ = c3.Close()
	if n := refused(t, reg, "conns", admission.ReasonTotal); n != 1 {
		t.Errorf("refused{reason=total} = %v, want 1", n)
	}

	// Closing an admitted connection (server side) frees its slot.
	_ = s1.Close()
	_ = c1.Close()
	c4, got := dial()
	s4 := <-accepted
	if got != "welcome" {
		t.Errorf("after a close: %q, want welcome", got)
	}
	if open := gauge(t, reg, "conns"); open != 2 {
		t.Errorf("open = %v, want 2", open)
	}
	for _, c := range []net.Conn{s2, s4, c2, c4} {
		_ = c.Close()
	}
	if total, _ := l.Open(""); total != 0 {
		t.Errorf("Open = %d after every connection closed, want 0", total)
	}
}

// TestMiddleware: a request over the limit is answered 503 with
// Retry-After and does not reach the handler; one after it is served.
func TestMiddleware(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := admission.New(admission.Config{Name: "requests", Max: 1}, reg)
	if err != nil {
		t.Fatal(err)
	}
	inside, leave := make(chan struct{}), make(chan struct{})
	var served int
	var mu sync.Mutex
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		if r.URL.Path == "/slow" {
			inside <- struct{}{}
			<-leave
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	slow := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/slow")
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	<-inside
	resp, err := http.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a request over the limit: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(leave)
	if code := <-slow; code != http.StatusNoContent {
		t.Errorf("the admitted request: %d, want 204", code)
	}
	resp, err = http.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("a request after the slot was freed: %d, want 204", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if served != 2 {
		t.Errorf("the handler served %d requests, want 2 (the refused one must not reach it)", served)
	}
	if n := refused(t, reg, "requests", admission.ReasonTotal); n != 1 {
		t.Errorf("refused{reason=total} = %v, want 1", n)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := admission.New(admission.Config{Name: "a", Max: 1}, reg); err != nil {
		t.Fatal(err)
	}
	// A second limiter shares the collectors.
	if _, err := admission.New(admission.Config{Name: "b", Max: 1}, reg); err != nil {
		t.Fatalf("a second limiter on the same registry: %v", err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, limit string) float64 {
	t.Helper()
	return value(t, reg, "postline_admission_open", map[string]string{"limit": limit})
}

func refused(t *testing.T, reg *prometheus.Registry, limit, reason string) float64 {
	t.Helper()
	return value(t, reg, "postline_admission_refused_total", map[string]string{"limit": limit, "reason": reason})
}

// value returns the sample of name whose labels include want, 0 if none.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
