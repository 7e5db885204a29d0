package memstore

import (
	"context"
	"sync"
	"time"
	"weak"

	idem "github.com/idemkit/idem/core"
)

// Defaults for the options.
const (
	// DefaultMaxEntries is the number of records a Store holds before a new
	// claim evicts the record closest to expiry.
	DefaultMaxEntries = 100_000
	// DefaultSweepInterval is how often a Store removes expired records in
	// the background.
	DefaultSweepInterval = time.Minute
)

// sweepBatch is how many expired records the sweeper removes per lock
// acquisition, so that a large sweep never stalls claims for long.
const sweepBatch = 1024

var (
	_ idem.Store          = (*Store)(nil)
	_ idem.Getter         = (*Store)(nil)
	_ idem.Deleter        = (*Store)(nil)
	_ idem.ExpiredDeleter = (*Store)(nil)
	_ idem.Extender       = (*Store)(nil)
	_ idem.Notifier       = (*Store)(nil)
)

// An Option configures a Store.
type Option func(*config)

type config struct {
	maxEntries    int
	sweepInterval time.Duration
}

// WithMaxEntries sets how many records the store holds at most; the default
// is [DefaultMaxEntries]. When the store is full, a claim on a new key first
// evicts the record closest to expiry: an expired record if there is one,
// otherwise the live record that would expire soonest, even an in-progress
// claim or a completed response that could still have been replayed. Size
// it for the retention you need. A value of zero or less removes the limit.
func WithMaxEntries(n int) Option {
	return func(c *config) { c.maxEntries = n }
}

// WithSweepInterval sets how often a background goroutine removes expired
// records; the default is [DefaultSweepInterval]. The sweeper compares
// ExpiresAt with the wall clock (time.Now), since no caller's clock is at
// hand. A value of zero or less disables it: expired records then stay
// until they are claimed again, evicted, or removed by DeleteExpired.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweepInterval = d }
}

// Store is an in-memory idempotency store. Create one with [New]; call
// [Store.Close] when done with it to stop its sweeper. All methods are safe
// for concurrent use.
type Store struct {
	mu      sync.Mutex
	entries map[recordKey]*entry
	heap    expiryHeap
	waiters map[recordKey][]chan struct{}
	max     int

	// The sweeper goroutine holds only a weak pointer to the Store, so a
	// Store dropped without Close can be collected; the goroutine then exits
	// at its next tick.
	closeOnce sync.Once
	done      chan struct{} // closed by Close; nil when sweeping is disabled
}

type recordKey struct {
	scope, key string
}

// entry is one stored record. Strings are shared with the callers that
// provided them, which is safe since strings are immutable.
type entry struct {
	k           recordKey
	fingerprint string
	token       string // empty once completed
	state       idem.State
	resp        *idem.Response // immutable once set
	createdAt   time.Time
	leaseEnd    time.Time
	expiresAt   time.Time
	index       int // position in the expiry heap
}

// record returns a copy of the entry as an idem.Record.
func (e *entry) record() idem.Record {
	return idem.Record{
		Fingerprint: e.fingerprint,
		State:       e.state,
		Response:    e.resp,
		CreatedAt:   e.createdAt,
		LeaseEnd:    e.leaseEnd,
		ExpiresAt:   e.expiresAt,
	}
}

// blocks reports whether the entry refuses a claim at now: it has not
// expired, and if it is in progress, its lease has not ended.
func (e *entry) blocks(now time.Time) bool {
	if !now.Before(e.expiresAt) {
		return false
	}
	return e.state != idem.StateInProgress || now.Before(e.leaseEnd)
}

// holds reports whether the entry is an in-progress claim with token.
func (e *entry) holds(token string) bool {
	return e.state == idem.StateInProgress && e.token == token
}

// New returns an empty Store. Unless sweeping is disabled with
// [WithSweepInterval], it starts a goroutine that [Store.Close] stops.
func New(opts ...Option) *Store {
	cfg := config{maxEntries: DefaultMaxEntries, sweepInterval: DefaultSweepInterval}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Store{
		entries: make(map[recordKey]*entry),
		waiters: make(map[recordKey][]chan struct{}),
		max:     cfg.maxEntries,
	}
	if cfg.sweepInterval > 0 {
		s.done = make(chan struct{})
		go sweepLoop(weak.Make(s), s.done, cfg.sweepInterval)
	}
	return s
}

// Close stops the background sweeper. The store keeps working without it.
// Close is idempotent and always returns nil. The sweeper of a Store that
// becomes unreachable without Close exits at its first tick after the Store
// is collected.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.done != nil {
			close(s.done)
		}
	})
	return nil
}

func sweepLoop(store weak.Pointer[Store], done <-chan struct{}, interval time.Duration) {
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
			s.sweep(time.Now())
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
	for n != limit && len(s.heap) > 0 && !now.Before(s.heap[0].expiresAt) {
		s.remove(s.heap[0])
		n++
	}
	return n
}

// Len returns the number of records the store holds, including expired
// ones not yet reclaimed.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Claim takes (c.Scope, c.Key) when there is no record, when the record has
// expired at c.Now, or when it is an in-progress claim whose lease has ended
// at c.Now; otherwise it returns a copy of the record as Existing. See
// [idem.Store]. When the store is full, a claim on a new key evicts the
// record closest to expiry first (see [WithMaxEntries]).
func (s *Store) Claim(ctx context.Context, c idem.Claim) (idem.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idem.ClaimResult{}, err
	}
	k := recordKey{c.Scope, c.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[k]; ok {
		if e.blocks(c.Now) {
			rec := e.record()
			return idem.ClaimResult{Existing: &rec}, nil
		}
		// Take over the expired record or abandoned claim in place. Its
		// waiters stay: they wait for this key to settle, and the new
		// claim's completion or release wakes them.
		e.fingerprint = c.Fingerprint
		e.token = c.Token
		e.state = idem.StateInProgress
		e.resp = nil
		e.createdAt = c.Now
		e.leaseEnd = c.LeaseEnd
		e.expiresAt = c.LeaseEnd
		s.heap.fix(e.index)
		return idem.ClaimResult{Acquired: true}, nil
	}
	for s.max > 0 && len(s.entries) >= s.max {
		s.remove(s.heap[0])
	}
	e := &entry{
		k:           k,
		fingerprint: c.Fingerprint,
		token:       c.Token,
		state:       idem.StateInProgress,
		createdAt:   c.Now,
		leaseEnd:    c.LeaseEnd,
		expiresAt:   c.LeaseEnd,
	}
	s.entries[k] = e
	s.heap.push(e)
	return idem.ClaimResult{Acquired: true}, nil
}

// Complete stores resp, with a copy of its body, for the claim that holds
// token, replayable until expiresAt. The header map is kept as it is, since
// the caller never modifies it after Complete. It returns [idem.ErrLeaseLost] unless the record is in
// progress, holds token and now is before its lease end. See [idem.Store].
func (s *Store) Complete(ctx context.Context, scope, key, token string, resp idem.Response, now, expiresAt time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stored := storedResponse(&resp) // outside the lock: it may copy a large body
	k := recordKey{scope, key}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[k]
	if !ok || !e.holds(token) || !now.Before(e.leaseEnd) {
		return idem.ErrLeaseLost
	}
	e.state = idem.StateCompleted
	e.token = ""
	e.resp = stored
	e.leaseEnd = time.Time{}
	e.expiresAt = expiresAt
	s.heap.fix(e.index)
	s.notify(k)
	return nil
}

// Release deletes the in-progress record that holds token. It returns
// [idem.ErrLeaseLost] when there is no such record: the key has no record,
// another claim holds it, or it is completed. See [idem.Store].
func (s *Store) Release(ctx context.Context, scope, key, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[recordKey{scope, key}]
	if !ok || !e.holds(token) {
		return idem.ErrLeaseLost
	}
	s.remove(e)
	return nil
}

// Get returns a copy of the record for (scope, key), or false when there is
// none or it has expired at now. It implements [idem.Getter].
func (s *Store) Get(ctx context.Context, scope, key string, now time.Time) (idem.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[recordKey{scope, key}]
	if !ok || !now.Before(e.expiresAt) {
		return idem.Record{}, false, nil
	}
	return e.record(), true, nil
}

// Delete removes the record for (scope, key) whatever its state, and
// reports whether there was one, expired or not. Watchers of the key are
// woken. It implements [idem.Deleter].
func (s *Store) Delete(ctx context.Context, scope, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[recordKey{scope, key}]
	if ok {
		s.remove(e)
	}
	return ok, nil
}

// DeleteExpired removes every record that has expired at now and returns
// how many it removed. The background sweeper does the same with the wall
// clock. It implements [idem.ExpiredDeleter].
func (s *Store) DeleteExpired(ctx context.Context, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.removeExpired(now, -1), nil
}

// Extend moves the lease end (and with it ExpiresAt) of the in-progress
// claim that holds token to leaseEnd. It returns [idem.ErrLeaseLost] unless
// the record is in progress, holds token and now is before its current
// lease end. It implements [idem.Extender].
func (s *Store) Extend(ctx context.Context, scope, key, token string, now, leaseEnd time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[recordKey{scope, key}]
	if !ok || !e.holds(token) || !now.Before(e.leaseEnd) {
		return idem.ErrLeaseLost
	}
	e.leaseEnd = leaseEnd
	e.expiresAt = leaseEnd
	s.heap.fix(e.index)
	return nil
}

// Watch returns a channel that is closed once the record for (scope, key)
// is completed, released or removed (deleted, evicted, or swept after it
// expired). The key need not have a record yet. stop forgets the watch; it
// is idempotent, and the channel is never closed after stop returns unless
// it already was. It implements [idem.Notifier].
func (s *Store) Watch(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	k := recordKey{scope, key}
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters[k] = append(s.waiters[k], ch)
	s.mu.Unlock()
	stop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.waiters[k]
		for i, w := range list {
			if w == ch {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(s.waiters, k)
		} else {
			s.waiters[k] = list
		}
	}
	return ch, stop, nil
}

// remove deletes e from the map and the heap and wakes its watchers.
// s.mu must be held.
func (s *Store) remove(e *entry) {
	delete(s.entries, e.k)
	s.heap.remove(e.index)
	s.notify(e.k)
}

// notify closes and forgets every watcher of k. s.mu must be held.
func (s *Store) notify(k recordKey) {
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

// storedResponse returns the response Complete keeps: a copy of r with its
// own body. The header map is kept as given; the caller hands it over and
// never modifies it afterwards (see [idem.Store]).
func storedResponse(r *idem.Response) *idem.Response {
	c := &idem.Response{Status: r.Status, Header: r.Header, BodyOmitted: r.BodyOmitted}
	if len(r.Body) > 0 {
		c.Body = append([]byte(nil), r.Body...)
	}
	return c
}
