package event_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
)

// oldID is the derivation of the IDs published before lives were recorded,
// as docs/events.md describes it: the SHA-256 of the Message-ID, the
// recipient index, the type and, for a deferral only, the attempt, NUL
// separated, cut to 128 bits.
func oldID(messageID string, idx int, t event.Type, attempt int) string {
	b := []byte(messageID + "\x00" + strconv.Itoa(idx) + "\x00" + string(t))
	if t == event.Deferred {
		b = append(b, "\x00"+strconv.Itoa(attempt)...)
	}
	sum := sha256.Sum256(b)
	return "evt_" + hex.EncodeToString(sum[:16])
}

func TestNewLifeIDLifeZeroIsTheOldID(t *testing.T) {
	// Two IDs the code before lives derived (the first is the example in
	// docs/events.md): mail in flight across the upgrade keeps them.
	golden := []struct {
		id      string
		idx     int
		t       event.Type
		attempt int
		want    string
	}{
		{"order-7421.1764590400@shop.example", 1, event.Bounced, 0, "evt_a854a274513a1a73022979f35737675e"},
		{"order-7421.1764590400@shop.example", 0, event.Deferred, 3, "evt_b21bce4c121bcd88dd9a7479092d8f5d"},
	}
	for _, g := range golden {
		if got := event.NewLifeID(g.id, 0, g.idx, g.t, g.attempt); got != g.want {
			t.Errorf("NewLifeID(%q, 0, %d, %s, %d) = %s, want %s", g.id, g.idx, g.t, g.attempt, got, g.want)
		}
	}
	for _, tp := range event.Types {
		for _, attempt := range []int{0, 1, 7} {
			for _, idx := range []int{0, 1, 99} {
				want := oldID("a@b.example", idx, tp, attempt)
				if got := event.NewLifeID("a@b.example", 0, idx, tp, attempt); got != want {
					t.Errorf("NewLifeID(life 0, %d, %s, %d) = %s, want the old %s", idx, tp, attempt, got, want)
				}
				if got := event.NewID("a@b.example", idx, tp, attempt); got != want {
					t.Errorf("NewID(%d, %s, %d) = %s, want the old %s", idx, tp, attempt, got, want)
				}
			}
		}
	}
}

func TestNewLifeID(t *testing.T) {
	type args struct {
		id      string
		life    int64
		idx     int
		t       event.Type
		attempt int
	}
	const mid = "order-1@shop.example"
	tests := []struct {
		name string
		a, b args
		same bool
	}{
		{"one transition of one life written twice", args{mid, 42, 0, event.Bounced, 0}, args{mid, 42, 0, event.Bounced, 0}, true},
		{"a report's attempt does not matter", args{mid, 42, 0, event.Delivered, 0}, args{mid, 42, 0, event.Delivered, 3}, true},
		{"a deferral of one attempt written twice", args{mid, 42, 1, event.Deferred, 2}, args{mid, 42, 1, event.Deferred, 2}, true},
		{"the same transition in a replayed life", args{mid, 42, 0, event.Bounced, 0}, args{mid, 43, 0, event.Bounced, 0}, false},
		{"the same deferral in another life", args{mid, 42, 0, event.Deferred, 1}, args{mid, 7, 0, event.Deferred, 1}, false},
		{"a life against a row without one", args{mid, 42, 0, event.Accepted, 1}, args{mid, 0, 0, event.Accepted, 1}, false},
		{"a negative life is a life", args{mid, -42, 0, event.Accepted, 1}, args{mid, 42, 0, event.Accepted, 1}, false},
		{"another recipient", args{mid, 42, 0, event.Accepted, 1}, args{mid, 42, 1, event.Accepted, 1}, false},
		{"another type", args{mid, 42, 0, event.Delivered, 0}, args{mid, 42, 0, event.Complained, 0}, false},
		{"another attempt's deferral", args{mid, 42, 0, event.Deferred, 1}, args{mid, 42, 0, event.Deferred, 2}, false},
		{"another mail", args{mid, 42, 0, event.Accepted, 1}, args{"order-2@shop.example", 42, 0, event.Accepted, 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := event.NewLifeID(tt.a.id, tt.a.life, tt.a.idx, tt.a.t, tt.a.attempt)
			b := event.NewLifeID(tt.b.id, tt.b.life, tt.b.idx, tt.b.t, tt.b.attempt)
			if (a == b) != tt.same {
				t.Errorf("%+v -> %s, %+v -> %s; same = %v, want %v", tt.a, a, tt.b, b, a == b, tt.same)
			}
			if len(a) != len("evt_")+32 || a[:4] != "evt_" {
				t.Errorf("ID %q is not evt_ and 32 hex digits", a)
			}
		})
	}
}

// TestNewLifeIDDistinct checks that across lives, recipients, types and
// attempts no two transitions share an ID, and no transition of a life
// has the ID of a transition of life 0 (a row without a life).
func TestNewLifeIDDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, life := range []int64{0, 1, 2, 1 << 40, -1} {
		for idx := range 3 {
			for _, tp := range event.Types {
				attempts := []int{0}
				if tp == event.Deferred {
					attempts = []int{1, 2, 10}
				}
				for _, attempt := range attempts {
					what := strconv.FormatInt(life, 10) + "/" + strconv.Itoa(idx) + "/" + string(tp) + "/" + strconv.Itoa(attempt)
					id := event.NewLifeID("m@x", life, idx, tp, attempt)
					if other, dup := seen[id]; dup {
						t.Fatalf("%s and %s share ID %s", what, other, id)
					}
					seen[id] = what
				}
			}
		}
	}
}

// BenchmarkNewLifeID measures the derivation the worker runs for every
// event it writes (one or more per mail).
func BenchmarkNewLifeID(b *testing.B) {
	for _, life := range []int64{0, 4503599627370497} {
		b.Run(strconv.FormatInt(life, 10), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				_ = event.NewLifeID("order-7421.1764590400@shop.example", life, 1, event.Deferred, 3)
			}
		})
	}
}

// TestSchemaListsEveryType keeps the schema's type enum equal to Types, so
// a consumer validating with the schema file takes every type Postline
// publishes.
func TestSchemaListsEveryType(t *testing.T) {
	var doc struct {
		Properties struct {
			Type struct {
				Enum []event.Type `json:"enum"`
			} `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(event.SchemaJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(doc.Properties.Type.Enum, event.Types) {
		t.Errorf("schema type enum %v, want event.Types %v", doc.Properties.Type.Enum, event.Types)
	}
	if event.Unsubscribed.Terminal() {
		t.Error("unsubscribed is about the address, not the mail's delivery: it must not end a recipient's life")
	}
	if event.Redriven.Terminal() {
		t.Error("redriven starts a new life of the mail: it must not end a recipient's life")
	}
}

// TestSchemaListsEveryField keeps the schema's properties equal to the
// fields of Event, so a field added to one is added to the other.
func TestSchemaListsEveryField(t *testing.T) {
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(event.SchemaJSON, &doc); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for f := range reflect.TypeFor[event.Event]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	slices.Sort(fields)
	if got := slices.Sorted(maps.Keys(doc.Properties)); !slices.Equal(got, fields) {
		t.Errorf("schema properties %v, want the fields of Event %v", got, fields)
	}
}

func TestRedrivenEventRoundTrips(t *testing.T) {
	e := event.Event{Schema: event.Schema, ID: event.NewLifeID("m@x", 7, 1, event.Redriven, 0), Type: event.Redriven,
		At: time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC), MessageID: "m@x", Tenant: "acme", Stream: event.StreamBulk,
		Recipient: "b@example.test", RecipientIndex: 1, Note: "relay fixed, INC-42", Actor: "ops@example.com"}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"type":"redriven"`, `"note":"relay fixed, INC-42"`, `"actor":"ops@example.com"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	got, err := event.Decode(b)
	if err != nil || got.Note != e.Note || got.Actor != e.Actor || got.Type != event.Redriven {
		t.Errorf("Decode = %+v, %v", got, err)
	}
	// Other events leave both out.
	e.Type, e.Note, e.Actor = event.Accepted, "", ""
	if b, _ := e.Encode(); strings.Contains(string(b), "note") || strings.Contains(string(b), "actor") {
		t.Errorf("an event without a note or actor encodes them: %s", b)
	}
}
