package idem

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func TestHeartbeatFollowsTheRouteLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithLease(time.Hour), WithHeartbeat(30*time.Minute))
		runs := 0
		h := e.Middleware(TTL(3 * time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				time.Sleep(10 * time.Second)
			}
		}))
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		time.Sleep(5 * time.Second)
		if w := post(h, "/", "k", ""); w.Code != 409 {
			t.Errorf("a short route lease must be kept alive: %d, want 409", w.Code)
		}
		<-done
		if runs != 1 {
			t.Errorf("runs %d", runs)
		}
	})
}

func TestTinyRouteTTLWithHeartbeat(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithHeartbeat(time.Second))
	h := e.Middleware(TTL(time.Millisecond))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(h, "/", "k", "") // must not crash the process
}
