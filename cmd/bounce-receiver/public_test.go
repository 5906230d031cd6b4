package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// startPublic serves handler through publicServer with the given limits
// and returns its address.
func startPublic(t *testing.T, s settings, handler http.Handler) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server, ln, err := publicServer(s, prometheus.NewRegistry(), handler, raw)
	if err != nil {
		_ = raw.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(func() {
		_ = server.Close()
		wg.Wait()
	})
	return raw.Addr().String()
}

// exchange is one HTTP/1.1 client connection, read by hand so that the
// test sees what the server wrote before it read anything.
type exchange struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *exchange {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return &exchange{Conn: c, r: bufio.NewReader(c)}
}

// send writes a GET of path with the extra header lines.
func (e *exchange) send(t *testing.T, path, extra string) {
	t.Helper()
	if _, err := io.WriteString(e, "GET "+path+" HTTP/1.1\r\nHost: x\r\n"+extra+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// response reads one response and returns its status code and body.
func (e *exchange) response(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(e.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(body)
}

var noContent = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

// TestPublicConnectionLimit: a connection over POSTLINE_HOOKS_MAX_CONNECTIONS
// is answered 503 before it sends anything and closed; one that closes
// frees its place.
func TestPublicConnectionLimit(t *testing.T) {
	addr := startPublic(t, settings{HooksMaxConns: 2, HooksMaxRequests: 10}, noContent)
	var open []*exchange
	for range 2 {
		e := dial(t, addr)
		e.send(t, "/", "") // a reply proves the server admitted it
		if code, _ := e.response(t); code != http.StatusNoContent {
			t.Fatalf("a connection under the limit: %d, want 204", code)
		}
		open = append(open, e)
	}
	over := dial(t, addr)
	if code, _ := over.response(t); code != http.StatusServiceUnavailable {
		t.Errorf("a connection over the limit: %d, want 503", code)
	}
	if _, err := over.r.ReadByte(); err == nil {
		t.Error("the connection over the limit was left open")
	}

	_ = open[0].Close()
	// The server sees the close on its next read; poll until the place is
	// free (a refused dial costs nothing).
	deadline := time.Now().Add(5 * time.Second)
	for {
		e := dial(t, addr)
		e.send(t, "/", "")
		code, _ := e.response(t)
		if code == http.StatusNoContent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection after one closed: %d for 5s, want 204", code)
		}
		_ = e.Close()
		time.Sleep(10 * time.Millisecond) // the server closes on its own time
	}
}

// TestPublicRequestLimit: a request over POSTLINE_HOOKS_MAX_REQUESTS is
// answered 503 with Retry-After and never reaches the handler; the next
// one after the busy request is served.
func TestPublicRequestLimit(t *testing.T) {
	inside, leave := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	served := 0
	addr := startPublic(t, settings{HooksMaxConns: 10, HooksMaxRequests: 1}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		if r.URL.Path == "/slow" {
			inside <- struct{}{}
			<-leave
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	slow := dial(t, addr)
	slow.send(t, "/slow", "")
	<-inside
	busy := dial(t, addr)
	busy.send(t, "/fast", "")
	if code, body := busy.response(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "too many requests") {
		t.Errorf("a request while one is handled: %d %q, want 503 from the request limit", code, body)
	}
	close(leave)
	if code, _ := slow.response(t); code != http.StatusNoContent {
		t.Errorf("the handled request: %d, want 204", code)
	}
	busy.send(t, "/fast", "")
	if code, _ := busy.response(t); code != http.StatusNoContent {
		t.Errorf("a request after the busy one: %d, want 204", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if served != 2 {
		t.Errorf("the handler saw %d requests, want 2 (not the refused one)", served)
	}
}

// TestPublicHeaderCap: a header over publicMaxHeaderBytes is refused with
// 431 instead of being held (net/http would hold 1 MiB).
func TestPublicHeaderCap(t *testing.T) {
	addr := startPublic(t, settings{HooksMaxConns: 10, HooksMaxRequests: 10}, noContent)
	e := dial(t, addr)
	e.send(t, "/", "X-Big: "+strings.Repeat("a", publicMaxHeaderBytes+8192)+"\r\n")
	// The server closes with the header partly unread, so the body may
	// end in a reset: the status line is what counts.
	resp, err := http.ReadResponse(e.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a %d-byte header: %d, want 431", publicMaxHeaderBytes+8192, resp.StatusCode)
	}
}

func TestPublicServerSettings(t *testing.T) {
	for _, s := range []settings{{HooksMaxConns: 0, HooksMaxRequests: 1}, {HooksMaxConns: 1, HooksMaxRequests: -1}} {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, ln, err := publicServer(s, nil, noContent, raw)
		_ = ln.Close()
		if err == nil || !strings.Contains(err.Error(), "POSTLINE_HOOKS_MAX_") {
			t.Errorf("publicServer(%+v) = %v, want an error naming the setting", s, err)
		}
	}
}
