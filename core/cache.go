package idem

import (
	"bytes"
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file is the replay cache (WithReplayCache): completed records this
// engine stored or read, kept in the process so that a retry replays with
// no store call. A completed record never changes until it expires or an
// operator evicts it, so the cache keeps it for a bounded time (the
// cache's TTL, and never past the record's expiry), and never keeps a
// record in progress.

// WithReplayCache keeps up to maxBytes of completed responses in the
// process (counting their bodies, headers and about 512 bytes of
// bookkeeping each), and replays a retry from there with no store call
// for at most ttl after the start of the store call that stored or read
// the record (never past the record's own expiry). Records in progress
// are never cached, nor is a streamed response whose handler then
// panicked. An eviction through this engine's admin handler drops the
// cached copy at once, and no request that read the record before it
// puts it back; one through another instance, or straight in the store,
// is seen here within ttl: until then this instance may still replay the
// evicted answer. Default: off.
func WithReplayCache(maxBytes int64, ttl time.Duration) Option {
	return func(c *config) error {
		if maxBytes <= 0 || ttl <= 0 {
			return badOption("replay cache of %d bytes for %v: want both positive", maxBytes, ttl)
		}
		c.cacheBytes, c.cacheTTL = maxBytes, ttl
		return nil
	}
}

// replayCache is a byte-bounded LRU of completed records.
type replayCache struct {
	mu    sync.Mutex
	max   int64
	ttl   time.Duration
	bytes int64
	m     map[localKey]*list.Element
	lru   list.List     // front: most recently used; values are *cacheEntry
	gen   atomic.Uint64 // drops so far: a put learned before one is refused
}

type cacheEntry struct {
	k     localKey
	rec   *record
	until time.Time // wall clock: when the store call that read or stored it began, + ttl
	size  int64
}

func newReplayCache(max int64, ttl time.Duration) *replayCache {
	if max <= 0 {
		return nil
	}
	return &replayCache{max: max, ttl: ttl, m: make(map[localKey]*list.Element)}
}

// What an entry costs beyond its bytes, as measured on 64-bit platforms
// (TestReplayCacheBytesBound): the entry, its list element and map slot,
// the record and its response and header map; a header's slot, name and
// value slice; a value's string header.
const (
	entryOverhead  = 512
	headerOverhead = 64
	valueOverhead  = 16
)

// entrySize is what an entry is charged: its body, headers, key and
// bookkeeping.
func entrySize(k localKey, rec *record) int64 {
	n := int64(len(k.scope) + len(k.key) + len(rec.Fingerprint) + entryOverhead)
	if r := rec.Response; r != nil {
		n += int64(len(r.Body))
		for name, vs := range r.Header {
			n += int64(len(name) + headerOverhead)
			for _, v := range vs {
				n += int64(len(v) + valueOverhead)
			}
		}
	}
	return n
}

// generation is what put's gen compares with: read it before the store
// call whose answer is to be cached.
func (c *replayCache) generation() uint64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

// put keeps a completed record that the store read or stored at from
// (the wall clock when that call began, which the TTL counts from), unless
// a drop came after gen (the generation read before that call): an
// eviction through this engine is then not undone by an answer learned
// before it. own marks a record whose body and headers are the request's
// (its buffer, the handler's header map), which are copied.
func (c *replayCache) put(scope, key string, rec *record, own bool, from time.Time, gen uint64) {
	if c == nil || rec == nil || rec.State != store.Completed || rec.Response == nil {
		return
	}
	k := localKey{scope, key}
	size := entrySize(k, rec)
	if size > c.max {
		c.mu.Lock()
		defer c.mu.Unlock()
		if el, ok := c.m[k]; ok {
			c.remove(el) // an older copy must not outlive it
		}
		return
	}
	if own {
		resp := *rec.Response
		resp.Body, resp.Header = bytes.Clone(resp.Body), resp.Header.Clone()
		cp := *rec
		cp.Response = &resp
		rec = &cp
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.remove(el) // an older copy goes, whether or not this one stays
	}
	if c.gen.Load() != gen {
		return
	}
	c.m[k] = c.lru.PushFront(&cacheEntry{k: k, rec: rec, until: from.Add(c.ttl), size: size})
	c.bytes += size
	for c.bytes > c.max {
		c.remove(c.lru.Back())
	}
}

// get returns the cached record for the key, if it is still good at now
// (the engine's clock, for the record's expiry).
func (c *replayCache) get(scope, key string, now time.Time) *record {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[localKey{scope, key}]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !time.Now().Before(e.until) || !now.Before(e.rec.ExpiresAt) {
		c.remove(el)
		return nil
	}
	c.lru.MoveToFront(el)
	return e.rec
}

// drop forgets the key (an eviction through this engine).
func (c *replayCache) drop(scope, key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen.Add(1)
	if el, ok := c.m[localKey{scope, key}]; ok {
		c.remove(el)
	}
}

func (c *replayCache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.m, e.k)
	c.bytes -= e.size
}

// cached answers from the replay cache: a replay of the same request, or
// ok false (no entry, or another request's: the store decides).
func (f *flight) cached() (outcome, bool) {
	if f.e.cache == nil {
		return outcome{}, false // off: no clock read on every request
	}
	rec := f.e.cache.get(f.scope, f.key, f.e.clockNow())
	if rec == nil || !f.sameRequest(rec.Fingerprint) {
		return outcome{}, false
	}
	f.ev.Outcome = OutcomeReplayed
	return outcome{verdict: replay, rec: rec}, true
}
