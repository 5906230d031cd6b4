package render_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/postline/postline/internal/render"
)

func TestCacheConfig(t *testing.T) {
	t.Parallel()
	if got := (render.CacheConfig{}).WithDefaults().Size; got != render.DefaultCacheSize {
		t.Errorf("default Size = %d, want %d", got, render.DefaultCacheSize)
	}
	if _, err := render.NewCache(render.CacheConfig{Size: -1}); err == nil {
		t.Error("NewCache accepted Size -1")
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	c, err := render.NewCache(render.CacheConfig{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	loader := func(name string, n int, text string) func() (render.Version, map[string]render.Layout, error) {
		return func() (render.Version, map[string]render.Layout, error) {
			loads.Add(1)
			return render.Version{Template: name, Number: n, Subject: "s", Text: text}, nil, nil
		}
	}

	// Concurrent first uses of one version load and compile it once.
	var wg sync.WaitGroup
	got := make([]*render.Compiled, 16)
	for i := range got {
		wg.Go(func() {
			cc, err := c.Get("a", 1, loader("a", 1, "t"))
			if err != nil {
				t.Error(err)
			}
			got[i] = cc
		})
	}
	wg.Wait()
	if loads.Load() != 1 {
		t.Errorf("loads = %d, want 1", loads.Load())
	}
	for _, cc := range got {
		if cc != got[0] || cc.Template() != "a" || cc.Version() != 1 {
			t.Fatalf("Get returned %v and %v", got[0], cc)
		}
	}

	// A version that does not compile keeps its error without recompiling.
	for range 3 {
		if _, err := c.Get("a", 2, loader("a", 2, "{{.x")); err == nil {
			t.Fatal("Get of a broken version succeeded")
		}
	}
	if loads.Load() != 2 {
		t.Errorf("loads = %d, want 2", loads.Load())
	}

	// A load error is not cached.
	errDown := errors.New("store down")
	for range 2 {
		if _, err := c.Get("b", 1, func() (render.Version, map[string]render.Layout, error) {
			loads.Add(1)
			return render.Version{}, nil, errDown
		}); !errors.Is(err, errDown) {
			t.Fatalf("Get = %v, want the load error", err)
		}
	}
	if loads.Load() != 4 {
		t.Errorf("loads = %d, want 4", loads.Load())
	}

	// A loader that returns another version is refused.
	if _, err := c.Get("b", 1, loader("b", 9, "t")); err == nil {
		t.Error("Get accepted a loader returning another version")
	}

	// The cache is bounded: a third version evicts the least recently used.
	if _, err := c.Get("c", 1, loader("c", 1, "t")); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	before := loads.Load()
	if _, err := c.Get("a", 1, loader("a", 1, "t")); err != nil {
		t.Fatal(err)
	}
	if loads.Load() != before+1 {
		t.Errorf("evicted version was not loaded again")
	}

	c.Remove("a", 1)
	if _, err := c.Get("a", 1, loader("a", 1, "t")); err != nil {
		t.Fatal(err)
	}
	if loads.Load() != before+2 {
		t.Errorf("removed version was not loaded again")
	}
}
