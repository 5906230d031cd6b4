package render

import (
	"cmp"
	"fmt"
	"strconv"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// DefaultCacheSize is the default number of compiled versions a Cache holds.
const DefaultCacheSize = 512

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Size is the number of compiled versions kept. Defaults to
	// DefaultCacheSize.
	Size int
}

// WithDefaults returns cfg with its zero fields set to their defaults.
func (cfg CacheConfig) WithDefaults() CacheConfig {
	cfg.Size = cmp.Or(cfg.Size, DefaultCacheSize)
	return cfg
}

// Validate reports a field with a bad value.
func (cfg CacheConfig) Validate() error {
	if cfg.Size <= 0 {
		return fmt.Errorf("render cache: Size %d must be positive", cfg.Size)
	}
	return nil
}

type cacheKey struct {
	template string
	version  int
}

type cacheEntry struct {
	c   *Compiled
	err error
}

// Cache is a bounded LRU of compiled versions keyed by template and version
// number. Versions are immutable, so each compiles once while it stays in
// the cache, and so does a version that fails to compile (its error is
// kept). Layouts are taken to be part of the version: a caller that changes
// a layout uses a new Cache or removes the versions that use it.
type Cache struct {
	lru   *lru.Cache[cacheKey, cacheEntry]
	group singleflight.Group
}

// NewCache returns an empty cache.
func NewCache(cfg CacheConfig) (*Cache, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l, err := lru.New[cacheKey, cacheEntry](cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("render cache: %w", err)
	}
	return &Cache{lru: l}, nil
}

// Get returns the compiled template version, calling load and compiling
// only when it is not cached. Concurrent calls for the same version share
// one load and compile. An error of load is not cached.
func (c *Cache) Get(template string, version int, load func() (Version, map[string]Layout, error)) (*Compiled, error) {
	k := cacheKey{template, version}
	if e, ok := c.lru.Get(k); ok {
		return e.c, e.err
	}
	v, err, _ := c.group.Do(template+"\x00"+strconv.Itoa(version), func() (any, error) {
		if e, ok := c.lru.Get(k); ok {
			return e, nil
		}
		ver, layouts, err := load()
		if err != nil {
			return nil, fmt.Errorf("render cache: load %s version %d: %w", template, version, err)
		}
		if ver.Template != template || ver.Number != version {
			return nil, fmt.Errorf("render cache: load %s version %d returned %s version %d", template, version, ver.Template, ver.Number)
		}
		cc, cerr := Compile(ver, layouts)
		e := cacheEntry{c: cc, err: cerr}
		c.lru.Add(k, e)
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	e := v.(cacheEntry)
	return e.c, e.err
}

// Remove drops a version from the cache.
func (c *Cache) Remove(template string, version int) {
	c.lru.Remove(cacheKey{template, version})
}

// Len returns the number of versions cached.
func (c *Cache) Len() int { return c.lru.Len() }
