package webhook

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/testkit"
)

// BenchmarkDispatchHealthy measures a lane's cost per event to an endpoint
// that takes everything at once: decode, filter, sign, POST, account. The
// endpoint (httptest, signature verified by the library) is in the figure
// too, as it is in make bench's outcomes row.
func BenchmarkDispatchHealthy(b *testing.B) {
	rc := newReceiver(b, func(*http.Request, string, int) int { return http.StatusNoContent })
	h := startHarness(b, Config{Endpoints: []Endpoint{rc.endpoint(b, "bench")}})
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = mustEncode(b, newEvent(fmt.Sprintf("<b%d@x>", i), 0, event.Accepted, "acme"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, body := range bodies {
		h.send(body)
	}
	last := h.next - 1
	testkit.Eventually(b, time.Minute, "every event delivered", func() bool { return h.done("bench", last) == 1 })
	b.StopTimer()
	if _, delivered := rc.total(); delivered != b.N {
		b.Fatalf("%d delivered of %d", delivered, b.N)
	}
}
