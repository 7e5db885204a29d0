package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"weak"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// Defaults for the options.
const (
	// DefaultMaxEntries is the number of records a Store holds before a
	// claim on a new key must evict one (see [WithMaxEntries]).
	DefaultMaxEntries = 100_000
	// DefaultMaxBytes is the memory the stored results (their heads and
	// bodies) may take before a completion must evict (see [WithMaxBytes]).
	DefaultMaxBytes = 256 << 20
	// DefaultSweepInterval is how often a Store removes expired records in
	// the background.
	DefaultSweepInterval = time.Minute
)

// sweepBatch is how many expired records the sweeper removes per lock
// acquisition, so that a large sweep never stalls claims for long.
const sweepBatch = 1024

// ErrFull is returned by [Store.Claim] for a new key when the store holds
// its maximum number of records (see [WithMaxEntries]) and every one is a
// live in-progress claim, none of which may be evicted. Claim then stores
// nothing and changes nothing. The idem engine treats it like any store
// failure: it answers 503 (or, with idem.WithFailOpen, runs the request
// unprotected). There is room again once a claim completes, is released,
// or reaches the end of its lease.
var ErrFull = errors.New("memstore: full: every entry is a request in progress")

// ErrBadOption is wrapped by the panic of an option given a value it
// cannot mean: a negative bound or interval. It wraps idem.ErrBadOption.
// New returns no error, so the With* functions check their argument where
// they are called and panic, as idem's HTTP options do: like a bad pattern
// given to http.ServeMux, it is a mistake in the program.
var ErrBadOption = fmt.Errorf("memstore: %w", idem.ErrBadOption)

// mustNotBeNegative panics with an error wrapping ErrBadOption when v is
// negative.
func mustNotBeNegative[T int | int64 | time.Duration](what string, v T) {
	if v < 0 {
		panic(fmt.Errorf("%w: %s %v is negative; 0 turns it off", ErrBadOption, what, v))
	}
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Getter         = (*Store)(nil)
	_ store.Deleter        = (*Store)(nil)
	_ store.ExpiredDeleter = (*Store)(nil)
	_ store.Extender       = (*Store)(nil)
	_ store.Evicter        = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
)

// An Option configures a Store.
type Option func(*config)

type config struct {
	maxEntries    int
	maxBytes      int64
	sweepInterval time.Duration
	clock         func() time.Time
}

// WithMaxEntries sets how many records the store holds at most; the default
// is [DefaultMaxEntries]. Zero removes the limit; a negative value panics
// (see [ErrBadOption]).
//
// When the store is full, a claim on a new key first evicts one record,
// judging expiry at the claim's Now:
//
//  1. an expired record, if there is one: a completed record at or past
//     its ExpiresAt, or an abandoned claim at or past its lease end;
//     of several, the one that expired first;
//  2. otherwise the completed record closest to its ExpiresAt, although a
//     retry could still have replayed it (that retry then runs again).
//
// A live in-progress claim is never evicted, since a duplicate of its
// request could then run while it still does. When every record is one,
// Claim returns [ErrFull]. Size the store for the requests in flight plus
// the completed records you want to keep for their whole retention.
func WithMaxEntries(n int) Option {
	mustNotBeNegative("max entries", n)
	return func(c *config) { c.maxEntries = n }
}

// WithMaxBytes sets how many bytes of results (heads and bodies) the store
// keeps at most; the default is [DefaultMaxBytes]. Zero removes the limit;
// a negative value panics (see [ErrBadOption]). A completion that would
// pass it first evicts, in the order of [WithMaxEntries] (expired records,
// then the completed records closest to expiry, never a live claim); a
// result larger than the whole budget is stored without its body
// (store.Result.BodyOmitted, its Head kept), as the engine stores one over
// its response cap.
func WithMaxBytes(n int64) Option {
	mustNotBeNegative("max bytes", n)
	return func(c *config) { c.maxBytes = n }
}

// WithSweepInterval sets how often a background goroutine removes expired
// records; the default is [DefaultSweepInterval]. The sweeper compares
// ExpiresAt with the store's clock (see [WithClock]), since no caller's
// time is at hand. Zero disables it: expired records then stay until they
// are claimed again, evicted, or removed by DeleteExpired. A negative
// value panics (see [ErrBadOption]).
func WithSweepInterval(d time.Duration) Option {
	mustNotBeNegative("sweep interval", d)
	return func(c *config) { c.sweepInterval = d }
}

// WithClock sets the clock the background sweeper reads to decide which
// records have expired; the default, also selected by nil, is time.Now.
// Give it the clock the engine uses (idem.WithClock), so that the sweeper
// agrees with the engine on when a record expires. It is called from the
// sweeper's goroutine and must be safe for concurrent use. Nothing else
// reads it: Claim, eviction, Get, Complete, Extend and DeleteExpired
// compare with the time their caller passes.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}

// Store is an in-memory idempotency store. Create one with [New]; call
// [Store.Close] when done with it to stop its sweeper. All methods are safe
// for concurrent use. The zero Store works too, without limits and without
// a sweeper (as New with WithMaxEntries(0), WithMaxBytes(0) and
// WithSweepInterval(0)).
type Store struct {
	mu      sync.Mutex
	entries map[store.Ref]*entry
	// Every entry is in exactly one of running and done, chosen by its
	// state: running holds the in-progress claims, ordered by lease end
	// (their ExpiresAt), and done the completed records, ordered by
	// ExpiresAt. Eviction takes from running only what has expired.
	// lingering holds the in-progress claims too, ordered by when the
	// sweeper may remove them (entry.gone, a lease after the lease end).
	running   expiryHeap
	done      expiryHeap
	lingering expiryHeap
	waiters   map[store.Ref][]chan struct{}
	max       int
	// bytes is what the completed records' results take (entry.size
	// summed), bounded by maxBytes.
	bytes, maxBytes int64

	// The sweeper goroutine holds only a weak pointer to the Store, so a
	// Store dropped without Close can be collected; the goroutine then exits
	// at its next tick.
	closeOnce sync.Once
	closed    chan struct{} // closed by Close; nil when sweeping is disabled
}

// entry is one stored record. Strings are shared with the callers that
// provided them, which is safe since strings are immutable.
type entry struct {
	store.Record // its Result's bytes are the store's own, never changed once set
	k            store.Ref
	token        string    // the claim's token, kept once completed (Evict)
	gone         time.Time // when the store may remove it (the heaps' order)
	index        int       // position in the heap of its state (Store.heapOf)
	gindex       int       // position in lingering, when in progress
	size         int64     // resultSize of the Result, counted in Store.bytes
}

// holds reports whether the entry is an in-progress claim with token.
func (e *entry) holds(token string) bool {
	return e.State == store.InProgress && e.token == token
}

// setGone sets when the record may be removed: a completed record at its
// expiry; an in-progress one as long again as its lease has lasted after
// its lease end, so a late Complete still finds it (see store.Store).
func (e *entry) setGone() {
	e.gone = e.ExpiresAt
	if e.State == store.InProgress {
		e.gone = e.LeaseEnd.Add(e.LeaseEnd.Sub(e.CreatedAt))
	}
}

// New returns an empty Store. Unless sweeping is disabled with
// [WithSweepInterval], it starts a goroutine that [Store.Close] stops.
func New(opts ...Option) *Store {
	cfg := config{maxEntries: DefaultMaxEntries, maxBytes: DefaultMaxBytes, sweepInterval: DefaultSweepInterval, clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.clock == nil {
		cfg.clock = time.Now
	}
	s := &Store{
		entries:   make(map[store.Ref]*entry),
		lingering: expiryHeap{byGone: true},
		waiters:   make(map[store.Ref][]chan struct{}),
		max:       cfg.maxEntries,
		maxBytes:  cfg.maxBytes,
	}
	if cfg.sweepInterval > 0 {
		s.closed = make(chan struct{})
		go sweepLoop(weak.Make(s), s.closed, cfg.sweepInterval, cfg.clock)
	}
	return s
}

// init makes the maps of a zero Store, on its first write; s.mu is held.
func (s *Store) init() {
	if s.entries == nil {
		s.entries = make(map[store.Ref]*entry)
		s.waiters = make(map[store.Ref][]chan struct{})
		s.lingering.byGone = true
	}
}

// Close stops the background sweeper. The store keeps working without it.
// Close is idempotent and always returns nil. The sweeper of a Store that
// becomes unreachable without Close exits at its first tick after the Store
// is collected.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.closed != nil {
			close(s.closed)
		}
	})
	return nil
}

func sweepLoop(store weak.Pointer[Store], done <-chan struct{}, interval time.Duration, clock func() time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			s := store.Value()
			if s == nil {
				return
			}
			s.sweep(clock())
		}
	}
}

// sweep removes the records expired at now, a batch per lock acquisition.
func (s *Store) sweep(now time.Time) int {
	total := 0
	for {
		n := s.removeExpired(now, sweepBatch)
		total += n
		if n < sweepBatch {
			return total
		}
	}
}

// removeExpired removes up to limit records expired at now (all of them
// when limit is negative) and returns how many it removed.
func (s *Store) removeExpired(now time.Time, limit int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n != limit {
		e := s.firstRemovable(now)
		if e == nil {
			break
		}
		s.remove(e)
		n++
	}
	return n
}

// firstExpired returns the record, of either state, that expired first if
// it has expired at now (an in-progress claim's ExpiresAt is its lease
// end), or nil. s.mu must be held.
func (s *Store) firstExpired(now time.Time) *entry {
	e, d := s.running.min(), s.done.min()
	if e == nil || (d != nil && d.ExpiresAt.Before(e.ExpiresAt)) {
		e = d
	}
	if e == nil || now.Before(e.ExpiresAt) {
		return nil
	}
	return e
}

// firstRemovable returns a record that may be removed at now: a completed
// record that has expired, or an in-progress one a lease past its lease
// end (entry.gone), whichever comes first; or nil. s.mu must be held.
func (s *Store) firstRemovable(now time.Time) *entry {
	e, d := s.lingering.min(), s.done.min()
	if e == nil || (d != nil && d.gone.Before(e.gone)) {
		e = d
	}
	if e == nil || now.Before(e.gone) {
		return nil
	}
	return e
}

// victim returns the record a claim on a new key evicts at now when the
// store is full: the record that expired first if any has, otherwise the
// completed record closest to expiry, never a live in-progress claim. It
// returns nil when every record is a live in-progress claim. s.mu must be
// held.
func (s *Store) victim(now time.Time) *entry {
	if e := s.firstExpired(now); e != nil {
		return e
	}
	return s.done.min()
}

// Len returns the number of records the store holds, including expired
// ones not yet reclaimed.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Bytes returns what the stored results' heads and bodies take, the figure
// [WithMaxBytes] bounds.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Claim takes (c.Scope, c.Key) when there is no record, when the record has
// expired at c.Now, or when it is an in-progress claim whose lease has ended
// at c.Now; otherwise it returns a copy of the record as Existing, whose
// Result shares the store's bytes (read-only). See [store.Store]. When the
// store is full, a claim on a new key first evicts an expired record or
// else the completed record closest to expiry, and returns [ErrFull] when
// every record is a live in-progress claim (see [WithMaxEntries]).
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return store.ClaimResult{}, err
	}
	k := c.Ref()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[k]; ok {
		if !e.Takeable(c.Now) {
			rec := e.Record
			return store.ClaimResult{Existing: &rec}, nil
		}
		// Take over the expired record or abandoned claim in place. Its
		// waiters stay: they wait for this key to settle, and the new
		// claim's completion or release wakes them.
		wasRunning := e.State == store.InProgress
		if !wasRunning {
			s.done.remove(e)
			s.bytes -= e.size
			e.size = 0
		}
		e.Fingerprint = c.Fingerprint
		e.token = c.Token
		e.State = store.InProgress
		e.Result = store.Result{}
		e.CreatedAt = c.Now
		e.LeaseEnd = c.LeaseEnd
		e.ExpiresAt = c.LeaseEnd
		e.setGone()
		if wasRunning {
			s.running.fix(e)
			s.lingering.fix(e)
		} else {
			s.running.push(e)
			s.lingering.push(e)
		}
		return store.ClaimResult{Acquired: true}, nil
	}
	for s.max > 0 && len(s.entries) >= s.max {
		v := s.victim(c.Now)
		if v == nil {
			return store.ClaimResult{}, ErrFull
		}
		s.remove(v)
	}
	e := &entry{
		Record: store.Record{
			Fingerprint: c.Fingerprint,
			State:       store.InProgress,
			CreatedAt:   c.Now,
			LeaseEnd:    c.LeaseEnd,
			ExpiresAt:   c.LeaseEnd,
		},
		k:     k,
		token: c.Token,
	}
	e.setGone()
	s.init()
	s.entries[k] = e
	s.running.push(e)
	s.lingering.push(e)
	return store.ClaimResult{Acquired: true}, nil
}

// Complete stores a copy of c.Result (its Head and Body: the record is a
// snapshot the store owns, and the caller reuses that memory) for the claim
// h, replayable until c.ExpiresAt. A result larger than the whole byte
// budget is kept without its Body, with BodyOmitted set (see
// [WithMaxBytes]). It returns [store.ErrLeaseLost] unless the record is in
// progress and holds h.Token; a claim whose lease ended without a takeover
// still holds it. See [store.Store]. From then on the record may be
// evicted to make room (see [WithMaxEntries]).
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(c.Result.Head) == 0 {
		return errors.New("memstore: complete: the result has no head") // it would read back as corrupt
	}
	res := c.Result
	if s.maxBytes > 0 && resultSize(&res) > s.maxBytes {
		res.Body, res.BodyOmitted = nil, true
	}
	stored := storedResult(&res) // outside the lock: it may copy a large body
	size := resultSize(&stored)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[h.Ref]
	if !ok || !e.holds(h.Token) {
		return store.ErrLeaseLost
	}
	// Out of the claims' heaps first: a completion after the lease end
	// (which still holds the claim) must not evict its own record.
	s.running.remove(e)
	s.lingering.remove(e)
	for s.maxBytes > 0 && s.bytes+size > s.maxBytes {
		// Only completed records hold bytes, and e is in no heap, so
		// this ends with room.
		v := s.victim(c.Now)
		if v == nil {
			break
		}
		s.remove(v)
	}
	e.size = size
	s.bytes += size
	e.State = store.Completed
	e.Result = stored
	e.LeaseEnd = time.Time{}
	e.ExpiresAt = c.ExpiresAt
	e.setGone()
	s.done.push(e)
	s.notify(h.Ref)
	return nil
}

// Release deletes the in-progress record h holds. It returns
// [store.ErrLeaseLost] when there is no such record: the key has no
// record, another claim holds it, or it is completed. See [store.Store].
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[h.Ref]
	if !ok || !e.holds(h.Token) {
		return store.ErrLeaseLost
	}
	s.remove(e)
	return nil
}

// Get returns a copy of the record r names, or false when there is none or
// it has expired at now. Its Result shares the store's bytes (read-only).
// It implements [store.Getter].
func (s *Store) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[r]
	if !ok || !now.Before(e.ExpiresAt) {
		return store.Record{}, false, nil
	}
	return e.Record, true, nil
}

// Delete removes the record r names whatever its state, and reports
// whether there was one, expired or not. Watchers of the key are woken. It
// implements [store.Deleter].
func (s *Store) Delete(ctx context.Context, r store.Ref) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[r]
	if ok {
		s.remove(e)
	}
	return ok, nil
}

// DeleteExpired removes every record that has expired at now (completed
// records and abandoned claims) and returns how many it removed; their
// watchers are woken. The background sweeper does the same with the
// store's clock (see [WithClock]). It implements [store.ExpiredDeleter].
func (s *Store) DeleteExpired(ctx context.Context, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.removeExpired(now, -1), nil
}

// Extend moves the lease end (and with it ExpiresAt) of the in-progress
// claim h to leaseEnd. It returns [store.ErrLeaseLost] unless the record
// is in progress and holds h.Token; a claim whose lease ended without a
// takeover still holds it. It implements [store.Extender].
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[h.Ref]
	if !ok || !e.holds(h.Token) {
		return store.ErrLeaseLost
	}
	e.LeaseEnd = leaseEnd
	e.ExpiresAt = leaseEnd
	e.setGone()
	s.running.fix(e)
	s.lingering.fix(e)
	return nil
}

// Evict deletes the record h names, in progress or completed, while it
// holds h.Token, and wakes its watchers. It returns [store.ErrLeaseLost],
// changing nothing, when another claim holds the key or there is no
// record. It implements [store.Evicter].
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[h.Ref]
	if !ok || e.token != h.Token {
		return store.ErrLeaseLost
	}
	s.remove(e)
	return nil
}

// Watch returns a channel that is closed once the record r names is
// completed, released or removed (deleted, evicted, or swept after it
// expired). The key need not have a record yet. stop forgets the watch; it
// is idempotent, and the channel is never closed after stop returns unless
// it already was. It implements [store.Notifier].
func (s *Store) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{})
	s.mu.Lock()
	s.init()
	s.waiters[r] = append(s.waiters[r], ch)
	s.mu.Unlock()
	stop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.waiters[r]
		for i, w := range list {
			if w == ch {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(s.waiters, r)
		} else {
			s.waiters[r] = list
		}
	}
	return ch, stop, nil
}

// remove deletes e from the map and its heap and wakes its watchers.
// s.mu must be held.
func (s *Store) remove(e *entry) {
	delete(s.entries, e.k)
	s.bytes -= e.size
	s.heapOf(e).remove(e)
	if e.State == store.InProgress {
		s.lingering.remove(e)
	}
	s.notify(e.k)
}

// heapOf returns the heap that holds e, which its state decides.
func (s *Store) heapOf(e *entry) *expiryHeap {
	if e.State == store.InProgress {
		return &s.running
	}
	return &s.done
}

// notify closes and forgets every watcher of k. s.mu must be held.
func (s *Store) notify(k store.Ref) {
	if len(s.waiters) == 0 {
		return
	}
	list, ok := s.waiters[k]
	if !ok {
		return
	}
	delete(s.waiters, k)
	for _, ch := range list {
		close(ch)
	}
}

// storedResult returns the result Complete keeps: a copy of r's Head and
// Body of the store's own, so that nothing the caller does to that memory
// afterwards reaches a replay. An empty Body is kept as nil. A small
// result (up to oneAlloc bytes, where Go's size classes are close
// together) takes one allocation for both; a larger one takes two, since
// in one a body of a whole number of pages (64 KiB) would take a page more
// for its few head bytes.
func storedResult(r *store.Result) store.Result {
	if len(r.Head)+len(r.Body) > oneAlloc {
		c := store.Result{Head: bytes.Clone(r.Head), BodyOmitted: r.BodyOmitted}
		if len(r.Body) > 0 {
			c.Body = bytes.Clone(r.Body)
		}
		return c
	}
	buf := make([]byte, len(r.Head)+len(r.Body))
	n := copy(buf, r.Head)
	c := store.Result{Head: buf[:n:n], BodyOmitted: r.BodyOmitted}
	if len(r.Body) > 0 {
		c.Body = buf[n:]
		copy(c.Body, r.Body)
	}
	return c
}

// oneAlloc is the largest result storedResult copies in one allocation.
const oneAlloc = 32 << 10

// resultSize is what r counts against the byte budget: its head and body
// bytes.
func resultSize(r *store.Result) int64 {
	return int64(len(r.Head)) + int64(len(r.Body))
}
