// Package admission owns how much work a server open to the internet takes
// on at once: a Limiter counts what it admitted (SMTP sessions, HTTP
// connections, HTTP requests in flight), in total and per client address,
// and refuses what would go over either count, so that a flood of clients
// costs the server a refusal each instead of memory. Listener applies a
// Limiter to the connections a net.Listener accepts; Middleware applies
// one to the requests an http.Handler serves.
//
// It does not decide what a refusal looks like on the wire (the caller's
// refuse function writes an SMTP 421 greeting, say), nor how much memory
// one admitted unit may use: each server bounds that itself.
package admission

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

// ErrFull is returned by Admit when the limiter holds Max units.
var ErrFull = errors.New("admission: limit reached")

// ErrClientFull is returned by Admit when the client holds MaxPerClient
// units.
var ErrClientFull = errors.New("admission: limit per client reached")

// The values of the reason label of postline_admission_refused_total.
const (
	ReasonTotal     = "total"
	ReasonPerClient = "per_client"
)

// Config configures a Limiter.
type Config struct {
	// Name names the limiter in the metrics' limit label (smtp_sessions,
	// http_requests, ...). Required.
	Name string
	// Max is the most units admitted at once. Required, at least 1.
	Max int
	// MaxPerClient is the most units admitted at once for one client (see
	// Client). Defaults to Max: no limit of its own.
	MaxPerClient int
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.MaxPerClient == 0 {
		cfg.MaxPerClient = cfg.Max
	}
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	switch {
	case cfg.Name == "":
		return errors.New("admission config: Name is required")
	case cfg.Max < 1:
		return fmt.Errorf("admission config: Max %d is below 1", cfg.Max)
	case cfg.MaxPerClient < 1 || cfg.MaxPerClient > cfg.Max:
		return fmt.Errorf("admission config: MaxPerClient %d is not in 1..Max (%d)", cfg.MaxPerClient, cfg.Max)
	}
	return nil
}

// Limiter counts admitted units in total and per client. It is safe for
// concurrent use; each admitted unit must be freed once (Admit's
// free may be called more than once: only the first counts).
type Limiter struct {
	cfg Config

	mu        sync.Mutex
	open      int
	perClient map[string]int // clients holding units only

	gauge     prometheus.Gauge
	fullTotal prometheus.Counter
	fullPer   prometheus.Counter
}

// New returns a Limiter. Its metrics, postline_admission_open{limit} and
// postline_admission_refused_total{limit,reason}, register on reg (nil:
// none); limiters of different Names share them.
func New(cfg Config, reg prometheus.Registerer) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := metricreg.NewSet(reg, "admission")
	open := set.GaugeVec("open", "Units admitted and not yet freed, by limit (smtp_sessions, http_connections, http_requests).", "limit")
	refused := set.CounterVec("refused_total", "Units refused because a limit was reached, by limit and reason (total, per_client).", "limit", "reason")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("admission: register metrics: %w", err)
	}
	return &Limiter{cfg: cfg, perClient: make(map[string]int),
		gauge:     open.WithLabelValues(cfg.Name),
		fullTotal: refused.WithLabelValues(cfg.Name, ReasonTotal),
		fullPer:   refused.WithLabelValues(cfg.Name, ReasonPerClient),
	}, nil
}

// Admit admits one unit for client, or refuses it with ErrFull or
// ErrClientFull. free gives the unit back; it is nil when refused.
func (l *Limiter) Admit(client string) (free func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.cfg.Max:
		l.fullTotal.Inc()
		return nil, ErrFull
	case l.perClient[client] >= l.cfg.MaxPerClient:
		l.fullPer.Inc()
		return nil, ErrClientFull
	}
	l.open++
	l.perClient[client]++
	l.gauge.Inc()
	var once sync.Once
	return func() { once.Do(func() { l.free(client) }) }, nil
}

func (l *Limiter) free(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.perClient[client] - 1; n > 0 {
		l.perClient[client] = n
	} else {
		delete(l.perClient, client)
	}
	l.gauge.Dec()
}

// Open returns the units admitted and not freed, in total and for
// client.
func (l *Limiter) Open(client string) (total, ofClient int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.perClient[client]
}

// Client returns the client a remote address (host:port, as
// net.Addr.String and http.Request.RemoteAddr write it) counts against:
// its IPv4 address, or the /64 network of an IPv6 address (one site's
// usual allocation, so one host cannot pass for many). An address that is
// not IP is its own client.
func Client(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return ip.String()
	}
	return p.String()
}

// Listener returns ln with its Accept admitting each connection through l:
// a connection over a limit is passed to refuse (with ErrFull or
// ErrClientFull), then closed, and Accept goes on to the next one; an
// admitted connection frees its unit when it is closed. refuse runs on
// the accepting goroutine: it must not block (a short write with a
// deadline is fine).
func (l *Limiter) Listener(ln net.Listener, refuse func(c net.Conn, err error)) net.Listener {
	return &listener{Listener: ln, l: l, refuse: refuse}
}

type listener struct {
	net.Listener
	l      *Limiter
	refuse func(net.Conn, error)
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		free, err := ln.l.Admit(Client(c.RemoteAddr().String()))
		if err != nil {
			if ln.refuse != nil {
				ln.refuse(c, err)
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, free: free}, nil
	}
}

// conn gives its unit back when closed.
type conn struct {
	net.Conn
	free func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.free()
	return err
}

// Middleware returns next with each request admitted through l, keyed by
// the client of its RemoteAddr; a request over a limit is answered 503
// Service Unavailable with Retry-After: 1 (the providers whose webhooks it
// serves post such a request again) and next does not see it.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		free, err := l.Admit(Client(r.RemoteAddr))
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many requests in progress, try again later", http.StatusServiceUnavailable)
			return
		}
		defer free()
		next.ServeHTTP(w, r)
	})
}
