package sqlbase

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Base is what every SQL store here keeps besides its database and its
// statements: its name (the prefix of its messages), its Options, and the
// lifetime of its background work (the sweeper, a watch poller or
// listener), which Close ends. Keep it in an unexported field, so that its
// methods do not become the store's.
type Base struct {
	name      string
	opts      Options
	errClosed error

	mu     sync.Mutex // orders Go with Close
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewBase returns the Base of a store called name ("mysqlstore") with the
// checked options opts. errClosed is the store's ErrClosed: what Watch and
// Sweep return after Close.
func NewBase(name string, opts Options, errClosed error) *Base {
	ctx, cancel := context.WithCancel(context.Background())
	return &Base{name: name, opts: opts, errClosed: errClosed, ctx: ctx, cancel: cancel}
}

// Name returns the store's name, as given to NewBase.
func (b *Base) Name() string { return b.name }

// Table returns the store's table.
func (b *Base) Table() string { return b.opts.Table }

// Logger returns where the store logs (never nil).
func (b *Base) Logger() *slog.Logger { return b.opts.Logger }

// SweepInterval returns the interval of the background sweeper; 0 when
// there is none.
func (b *Base) SweepInterval() time.Duration { return b.opts.SweepInterval }

// Context returns the context of the store's background work, cancelled
// by Close.
func (b *Base) Context() context.Context { return b.ctx }

// ErrClosed returns the store's ErrClosed, as given to NewBase.
func (b *Base) ErrClosed() error { return b.errClosed }

// Go runs f in a goroutine of the store's background work, with Context,
// and reports true; after Close it runs nothing and reports false. Close
// waits for every f to return.
func (b *Base) Go(f func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return false
	}
	b.wg.Go(func() { f(b.ctx) })
	return true
}

// StartSweeper starts sweep (the store's Sweep method) in the background
// with the configured interval, unless it is 0. An error other than the
// end of the store makes it log that the sweeper stopped.
func (b *Base) StartSweeper(sweep func(ctx context.Context, interval time.Duration) error) {
	interval := b.opts.SweepInterval
	if interval <= 0 {
		return
	}
	b.Go(func(ctx context.Context) {
		if err := sweep(ctx, interval); err != nil && !errors.Is(err, b.errClosed) && ctx.Err() == nil {
			b.opts.Logger.Error(b.name+": sweeper stopped", "table", b.opts.Table, "err", err)
		}
	})
}

// Close cancels Context and waits for the background work, then runs then
// (when not nil). Only the first call does anything.
func (b *Base) Close(then func()) {
	b.once.Do(func() {
		b.mu.Lock()
		b.cancel()
		b.mu.Unlock()
		b.wg.Wait()
		if then != nil {
			then()
		}
	})
}

// Sweep runs pass every interval until ctx ends, when it returns
// ctx.Err(), or until the store is closed, when it returns ErrClosed. It
// is the loop of a store's Sweep method. Each pass gets a context bounded
// by the interval (at least a second), so that a hung server cannot pile
// passes up, and cancelled by Close. A pass that fails while neither has
// ended is logged as a warning, with attr (such as how many rows it
// deleted) beside the table and the error, and the loop carries on.
func (b *Base) Sweep(ctx context.Context, interval time.Duration, pass func(ctx context.Context) (attr slog.Attr, err error)) error {
	if interval <= 0 {
		return fmt.Errorf("%s: sweep interval %v is not positive", b.name, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return b.errClosed
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		stop := context.AfterFunc(b.ctx, cancel)
		attr, err := pass(sctx)
		stop()
		cancel()
		if err != nil && ctx.Err() == nil && b.ctx.Err() == nil {
			b.opts.Logger.Warn(b.name+": sweep failed", "table", b.opts.Table, attr, "err", err)
		}
	}
}
