package fleet

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/internal/relaystate"
)

// DefaultStaleAfter is when a worker's relay state counts as stale: three
// publications missed at the worker's default POSTLINE_RELAY_STATE_INTERVAL
// (2s).
const DefaultStaleAfter = 6 * time.Second

// BreakerRow is a relay's circuit breaker as stored in postline_circuits.
type BreakerRow struct {
	Provider            string
	State               string // closed, open or half_open
	Failures            int
	OpenedAt, OpenUntil time.Time
	ProbeOwner          string
	ProbeUntil          time.Time
	LastClass           string
}

// Breaker is a relay's circuit breaker as operators see it.
type Breaker struct {
	State string `json:"state"` // closed, open or half_open
	// Since is when the breaker opened; set while open or half-open (a
	// closed breaker does not keep when it closed).
	Since     *time.Time `json:"since,omitempty"`
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// LastClass is the failure class of the last fault counted: why the
	// breaker opened while it is open or half-open.
	LastClass  string     `json:"last_class,omitempty"`
	Failures   int        `json:"failures"`
	ProbeOwner string     `json:"probe_owner,omitempty"`
	ProbeUntil *time.Time `json:"probe_until,omitempty"`
}

// Cut is a worker's last cut of a relay's send control.
type Cut struct {
	Controller string    `json:"controller"` // concurrency or rate
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// WorkerControl is one worker's send control of a relay.
type WorkerControl struct {
	WorkerID string `json:"worker_id"`
	// Stale is true when the worker has not published for the stale-after
	// time: it is shown, but left out of the relay's fleet counts.
	Stale    bool `json:"stale"`
	Priority int  `json:"priority"`
	Limit    int  `json:"limit"`
	InFlight int  `json:"in_flight"`
	// Rate is the learned rate in sends/s, nil while unpaced; FleetShare
	// the worker's share of the relay's fleet rate, nil when none is
	// configured.
	Rate            *float64  `json:"rate"`
	FleetShare      *float64  `json:"fleet_share"`
	Members         int       `json:"members"`
	ConcurrencyCuts int       `json:"concurrency_cuts"`
	RateCuts        int       `json:"rate_cuts"`
	LastCut         *Cut      `json:"last_cut,omitempty"`
	UpdatedAt       time.Time `json:"updated_at"`
	// AgeSeconds is how long before Relays.At the worker published.
	AgeSeconds float64 `json:"age_seconds"`
}

// Relay is one relay: its breaker and every worker's send control of it.
type Relay struct {
	Name string `json:"name"`
	// Breaker is nil when the relay has no row in postline_circuits.
	Breaker *Breaker `json:"breaker"`
	// FleetRate sums the learned rates of the live paced workers; Live and
	// Paced count the live workers and those of them that are paced.
	FleetRate float64         `json:"fleet_rate"`
	Live      int             `json:"live_workers"`
	Paced     int             `json:"paced_workers"`
	Workers   []WorkerControl `json:"workers"` // as relaystate lists them
}

// Relays is every relay with a breaker row or a worker's relay state.
type Relays struct {
	// At is the database's clock when read: ages are measured from it.
	At                time.Time `json:"at"`
	StaleAfterSeconds float64   `json:"stale_after_seconds"`
	Relays            []Relay   `json:"relays"`
}

// relaySource reads the breakers and the workers' relay states.
type relaySource interface {
	states(ctx context.Context) (relaystate.Listing, error)
	breakers(ctx context.Context) ([]BreakerRow, error)
}

// Relays reads every relay's breaker and the workers' relay states, and
// joins them (NewRelays). Errors wrap PostgreSQL's, so a missing table
// (a database not migrated to this version) can be told apart.
func (r *Reader) Relays(ctx context.Context) (Relays, error) {
	if r.relays == nil {
		return Relays{}, ErrNotConfigured
	}
	l, err := r.relays.states(ctx)
	if err != nil {
		return Relays{}, err
	}
	breakers, err := r.relays.breakers(ctx)
	if err != nil {
		return Relays{}, err
	}
	return NewRelays(l, breakers, r.staleAfter), nil
}

// NewRelays joins the breakers and the workers' relay states, read at the
// database time l.At: a worker that published more than staleAfter before
// is stale, shown but left out of the fleet's counts. Relays are in the
// order the workers try them (priority, then name); those no worker
// published come last, by name.
func NewRelays(l relaystate.Listing, breakers []BreakerRow, staleAfter time.Duration) Relays {
	rep := Relays{At: l.At.UTC(), StaleAfterSeconds: seconds(staleAfter), Relays: []Relay{}}
	byName := make(map[string]*Relay)
	view := func(name string) *Relay {
		if v, ok := byName[name]; ok {
			return v
		}
		v := &Relay{Name: name, Workers: []WorkerControl{}}
		byName[name] = v
		return v
	}
	for _, b := range breakers {
		view(b.Provider).Breaker = newBreaker(b)
	}
	for _, r := range l.Rows {
		v := view(r.Relay)
		age := l.At.Sub(r.UpdatedAt)
		w := WorkerControl{
			WorkerID: r.WorkerID, Stale: age > staleAfter, Priority: r.Priority, Limit: r.Limit, InFlight: r.InFlight,
			Members: r.Members, ConcurrencyCuts: r.ConcurrencyCuts, RateCuts: r.RateCuts,
			UpdatedAt: r.UpdatedAt.UTC(), AgeSeconds: seconds(age),
		}
		if r.Paced() {
			w.Rate = &r.Rate
		}
		if r.Shared() {
			w.FleetShare = &r.FleetShare
		}
		if r.LastCut.Controller != "" {
			w.LastCut = &Cut{Controller: r.LastCut.Controller, Reason: r.LastCut.Reason, At: r.LastCut.At.UTC()}
		}
		if !w.Stale {
			v.Live++
			if w.Rate != nil {
				v.Paced++
				v.FleetRate += *w.Rate
			}
		}
		v.Workers = append(v.Workers, w)
	}
	for _, v := range byName {
		rep.Relays = append(rep.Relays, *v)
	}
	// The lowest priority a worker gives the relay: the first it tries.
	priority := func(v Relay) (int, bool) {
		if len(v.Workers) == 0 {
			return 0, false
		}
		return slices.MinFunc(v.Workers, func(a, b WorkerControl) int { return cmp.Compare(a.Priority, b.Priority) }).Priority, true
	}
	slices.SortFunc(rep.Relays, func(a, b Relay) int {
		pa, oka := priority(a)
		pb, okb := priority(b)
		if oka != okb {
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(pa, pb), strings.Compare(a.Name, b.Name))
	})
	return rep
}

func newBreaker(b BreakerRow) *Breaker {
	v := &Breaker{State: b.State, LastClass: b.LastClass, Failures: b.Failures}
	if b.State != "closed" {
		v.Since, v.OpenUntil = timePtr(b.OpenedAt), timePtr(b.OpenUntil)
	}
	if b.State == "half_open" {
		v.ProbeOwner, v.ProbeUntil = b.ProbeOwner, timePtr(b.ProbeUntil)
	}
	return v
}

// timePtr is t in UTC, or nil when zero (a field left out).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// seconds is d in seconds, rounded to milliseconds.
func seconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}
