package idem

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

func TestStoreContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		defer cancel()

		c := storeContext(parent, time.Second, false)
		if c.Value(ctxKey{}) != "v" || c.Err() != nil {
			t.Fatalf("fresh context: value %v, err %v", c.Value(ctxKey{}), c.Err())
		}
		start := time.Now()
		<-c.Done()
		if time.Since(start) != time.Second || !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Errorf("deadline: after %v, err %v", time.Since(start), c.Err())
		}
		c.release()

		// Err without Done still reports the deadline, and Done agrees.
		c = storeContext(parent, time.Second, false)
		time.Sleep(2 * time.Second)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Errorf("late Err: %v", c.Err())
		}
		<-c.Done()
		c.release()

		// Attached: the parent's cancellation ends it; detached: it does not.
		att := storeContext(parent, time.Hour, false)
		det := storeContext(parent, time.Second, true)
		attDone, detDone := att.Done(), det.Done()
		cancel()
		<-attDone
		if !errors.Is(att.Err(), context.Canceled) {
			t.Errorf("attached after cancel: %v", att.Err())
		}
		synctest.Wait()
		select {
		case <-detDone:
			t.Error("a detached context ended with its parent")
		default:
		}
		<-detDone
		if !errors.Is(det.Err(), context.DeadlineExceeded) {
			t.Errorf("detached: %v", det.Err())
		}
		att.release()
		det.release()

		// context.AfterFunc uses the context's own AfterFunc: no goroutine
		// waits on Done, and the callback runs when the context ends.
		af := storeContext(context.Background(), time.Second, true)
		var ran, stopped atomic.Bool
		context.AfterFunc(af, func() { ran.Store(true) })
		stopMe := context.AfterFunc(af, func() { stopped.Store(true) })
		if !stopMe() {
			t.Error("stop before the end reports false")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !ran.Load() || stopped.Load() {
			t.Errorf("AfterFunc: ran %v, stopped one ran %v", ran.Load(), stopped.Load())
		}
		af.release()

		// After release, Done is closed and no timer is left behind.
		r := storeContext(context.Background(), time.Hour, false)
		r.release()
		<-r.Done()
		if r.Err() == nil {
			t.Error("released context has no error")
		}
	})
}
