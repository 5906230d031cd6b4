//go:build pprof

package ops

import (
	"log"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

// A binary built with -tags pprof (every one of them imports this package)
// serves Go's profiles on POSTLINE_PPROF_ADDR (default 127.0.0.1:6060),
// for profiling under load:
//
//	go build -tags pprof -o bin/worker-pprof ./cmd/worker
//	go tool pprof -sample_index=alloc_space http://127.0.0.1:6060/debug/pprof/allocs
//
// Production builds leave it out: the profiles show code paths and timings
// that an ops port reachable by scrapers should not.
func init() {
	addr := os.Getenv("POSTLINE_PPROF_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6060"
	}
	go func() { log.Println("pprof:", http.ListenAndServe(addr, nil)) }()
}
