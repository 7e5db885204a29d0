package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

const (
	// healthInterval is how long the subscription may stay silent before
	// the hub pings it; a second silent interval after a ping counts as a
	// broken connection.
	healthInterval = 15 * time.Second
	// subscribeTimeout bounds the wait for Redis to confirm a subscription.
	subscribeTimeout = 5 * time.Second
	minBackoff       = 50 * time.Millisecond
	maxBackoff       = 2 * time.Second
	// markTimeout bounds the script with which Watch marks a record.
	markTimeout = time.Second
)

// Watch implements store.Notifier. All watches of a Store share one Pub/Sub
// subscription on Channel, opened by the first Watch. Watch never waits for
// it: while the subscription is not confirmed (being opened by the first
// Watch, or broken and being reopened) a watch is registered at once and
// woken when Redis confirms the subscription, since a notification may
// have been missed meanwhile; the engine polls as well, and watches again.
// When it breaks, every pending watch is woken (spuriously) and the Store
// resubscribes in the background with backoff.
//
// While the subscription holds, Watch marks the record as waited for,
// in one script call bounded by ctx and a second (see markScript), and
// only the completion, release, eviction or delete of a marked record
// publishes: a request nobody waits for publishes nothing. The script
// returns the record's state, and a record that is not in progress (gone,
// or completed) wakes the watch at once, so an end that came before the
// mark is not missed; one that comes after it is published, and no
// notification sent after Watch returns is missed while the subscription
// holds. A mark that fails only costs the wake-up: the engine polls. The
// Store's own Complete, Release, Evict and Delete also wake its own
// watches of the key directly.
func (s *Store) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	k, id := recordKey(s.prefix, r.Scope, r.Key)
	ch, stop, err := s.hub.watch(ctx, id)
	if err != nil || !s.hub.up() {
		return ch, stop, err
	}
	mctx, cancel := context.WithTimeout(ctx, markTimeout)
	st, err := markScript.Run(mctx, s.client, []string{k}).Text()
	cancel()
	if err == nil && st != "1" {
		stop()
		return closed, func() {}, nil
	}
	return ch, stop, nil
}

// closed is a channel that is closed, for a watch woken at once.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// hub multiplexes one Pub/Sub subscription to every Watch of a Store. The
// subscription is opened by the first watch and lives until close.
type hub struct {
	client  redis.UniversalClient
	channel string

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{} // by record id
	started bool
	closed  bool
	isUp    bool          // the subscription is confirmed
	ps      *redis.PubSub // the current subscription, for close
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns
}

type waiter struct {
	ch chan struct{}
}

func newHub(client redis.UniversalClient, channel string) *hub {
	return &hub{
		client:  client,
		channel: channel,
		waiters: make(map[string]map[*waiter]struct{}),
	}
}

// watch registers a waiter for the record id and returns at once, whether
// or not the subscription is up: a waiter registered while it is down (or
// not yet confirmed, on the first watch) is woken when it comes up, since
// a notification may have been missed meanwhile.
func (h *hub) watch(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w := &waiter{ch: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, ErrClosed
	}
	set := h.waiters[id]
	if set == nil {
		set = make(map[*waiter]struct{})
		h.waiters[id] = set
	}
	set[w] = struct{}{}
	if !h.started {
		h.started = true
		runCtx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.done = make(chan struct{})
		go h.run(runCtx)
	}
	h.mu.Unlock()
	return w.ch, func() { h.remove(id, w) }, nil
}

// up reports whether the subscription is confirmed.
func (h *hub) up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.isUp
}

func (h *hub) remove(id string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[id]
	if _, ok := set[w]; !ok {
		return // already woken
	}
	delete(set, w)
	if len(set) == 0 {
		delete(h.waiters, id)
	}
}

// wake closes the channels of the watches of one record.
func (h *hub) wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[id] {
		close(w.ch)
	}
	delete(h.waiters, id)
}

// wakeAllLocked closes every watch's channel.
func (h *hub) wakeAllLocked() {
	for id, set := range h.waiters {
		for w := range set {
			close(w.ch)
		}
		delete(h.waiters, id)
	}
}

// markUp records a confirmed subscription. Every pending watch was
// registered while it was down or not yet confirmed, when a notification
// (a completion, say) may have been published and missed, so each is woken
// to re-check its record.
func (h *hub) markUp() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.isUp = true
	h.wakeAllLocked()
}

// markDown records a broken subscription. Notifications may be missed
// from now on, so when it was up every pending watch is woken to re-check
// its record (and poll). Watches registered while it is down are woken by
// markUp.
func (h *hub) markDown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.isUp {
		h.isUp = false
		h.wakeAllLocked()
	}
}

func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	backoff := minBackoff
	for {
		confirmed := h.session(ctx)
		h.markDown()
		if confirmed {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// session subscribes and dispatches messages until the subscription
// breaks or ctx is cancelled. It reports whether Redis confirmed the
// subscription.
func (h *hub) session(ctx context.Context) (confirmed bool) {
	ps := h.client.Subscribe(ctx, h.channel)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = ps.Close()
		return false
	}
	h.ps = ps
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.ps = nil
		h.mu.Unlock()
		_ = ps.Close()
	}()

	pinged := false
	for ctx.Err() == nil {
		timeout := healthInterval
		if !confirmed {
			timeout = subscribeTimeout
		}
		msg, err := ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			if confirmed && isTimeout(err) && !pinged {
				pinged = true
				if ps.Ping(ctx) == nil {
					continue
				}
			}
			return confirmed
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == h.channel && !confirmed {
				confirmed = true
				h.markUp()
			}
		case *redis.Message:
			if m.Channel == h.channel {
				h.wake(m.Payload)
			}
		}
	}
	return confirmed
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	ps, cancel, done := h.ps, h.cancel, h.done
	h.wakeAllLocked()
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if ps != nil {
		_ = ps.Close()
	}
	if done != nil {
		<-done
	}
}
