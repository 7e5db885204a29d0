package sqlbase

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWatchesWake: Wake fires every waiter of its key and only those; a
// removed waiter is forgotten; Watch fails after Close and for an ended
// context.
func TestWatchesWake(t *testing.T) {
	b, _ := newTestBase(0)
	var ws Watches
	a, b2 := WatchKey{"s", "a"}, WatchKey{"s", "b"}
	ch1, _, err := ws.Watch(t.Context(), b, a)
	if err != nil {
		t.Fatal(err)
	}
	ch2, _, _ := ws.Watch(t.Context(), b, a)
	ch3, stop3, _ := ws.Watch(t.Context(), b, b2)
	ws.Wake(a)
	if !fired(ch1) || !fired(ch2) || fired(ch3) {
		t.Errorf("after Wake(a): fired %v %v %v, want true true false", fired(ch1), fired(ch2), fired(ch3))
	}
	ws.Wake(a) // twice: nothing to close again
	stop3()
	stop3()
	if n := ws.Len(); n != 0 {
		t.Errorf("%d keys watched, want 0", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := ws.Watch(ctx, b, a); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with an ended context: %v", err)
	}
	b.Close(nil)
	if _, _, err := ws.Watch(t.Context(), b, a); !errors.Is(err, errTestClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
}

// fakeTable is what the poller's Read sees: rows by key, or a failure.
type fakeTable struct {
	mu    sync.Mutex
	rows  map[WatchKey]WatchRow
	err   error
	reads int
	chunk int // the largest number of keys one Read got
}

func (f *fakeTable) read(ctx context.Context, keys []WatchKey) (map[WatchKey]WatchRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	f.chunk = max(f.chunk, len(keys))
	if f.err != nil {
		return nil, f.err
	}
	out := map[WatchKey]WatchRow{}
	for _, k := range keys {
		if r, ok := f.rows[k]; ok {
			out[k] = r
		}
	}
	return out, nil
}

func (f *fakeTable) set(k WatchKey, r *WatchRow, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r == nil {
		delete(f.rows, k)
	} else {
		f.rows[k] = *r
	}
	f.err = err
}

// TestWatchesPoll: the poller wakes a waiter when its row is gone,
// completed, or claimed by another token, not while the same claim holds
// it; a failing read wakes everyone and is logged once; the poller idles
// without watches and stops on Close.
func TestWatchesPoll(t *testing.T) {
	k := WatchKey{"s", "k"}
	held := &WatchRow{Token: "t1", State: 1}
	for _, tc := range []struct {
		name   string
		change func(f *fakeTable)
		fire   bool
		log    string
	}{
		{"unchanged", func(f *fakeTable) {}, false, ""},
		{"completed", func(f *fakeTable) { f.set(k, &WatchRow{Token: "t1", State: 2}, nil) }, true, ""},
		{"deleted", func(f *fakeTable) { f.set(k, nil, nil) }, true, ""},
		{"taken over", func(f *fakeTable) { f.set(k, &WatchRow{Token: "t2", State: 1}, nil) }, true, ""},
		{"read fails", func(f *fakeTable) { f.set(k, held, errors.New("gone away")) }, true, "watch poll failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, logs := newTestBase(0)
				defer b.Close(nil)
				f := &fakeTable{rows: map[WatchKey]WatchRow{k: *held}}
				ws := Watches{Read: f.read, Interval: 100 * time.Millisecond}
				ch, stop, err := ws.Watch(t.Context(), b, k)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				time.Sleep(250 * time.Millisecond) // two polls: the first sees the claim
				synctest.Wait()
				if fired(ch) {
					t.Fatal("fired while the claim holds the key")
				}
				tc.change(f)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if fired(ch) != tc.fire {
					t.Errorf("fired %v, want %v", fired(ch), tc.fire)
				}
				if tc.log != "" {
					// Fails again for a new waiter, without a new warning;
					// then works again, for a third one.
					for _, fix := range []bool{false, true} {
						if fix {
							f.set(k, held, nil)
						}
						_, stop2, err := ws.Watch(t.Context(), b, k)
						if err != nil {
							t.Fatal(err)
						}
						defer stop2()
						time.Sleep(100 * time.Millisecond)
						synctest.Wait()
					}
				}
				got := logs.String()
				if tc.log != "" && (strings.Count(got, tc.log) != 1 || !strings.Contains(got, "watch poll works again")) || tc.log == "" && got != "" {
					t.Errorf("logs:\n%s", got)
				}
			})
		})
	}
}

// TestWatchesPollChunks: one Read gets at most Chunk keys, and an idle
// poller reads nothing.
func TestWatchesPollChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBase(0)
		defer b.Close(nil)
		f := &fakeTable{rows: map[WatchKey]WatchRow{}}
		ws := Watches{Read: f.read, Interval: time.Second, Chunk: 3}
		var stops []func()
		for _, key := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			k := WatchKey{"s", key}
			f.rows[k] = WatchRow{Token: "t", State: 1}
			_, stop, err := ws.Watch(t.Context(), b, k)
			if err != nil {
				t.Fatal(err)
			}
			stops = append(stops, stop)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if f.reads != 3 || f.chunk != 3 {
			t.Errorf("%d reads of at most %d keys, want 3 of 3", f.reads, f.chunk)
		}
		for _, stop := range stops {
			stop()
		}
		time.Sleep(time.Second) // the poll under way when the watches ended
		synctest.Wait()
		reads := f.reads
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f.reads != reads {
			t.Errorf("an idle poller read %d times", f.reads-reads)
		}
	})
}
