package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Drive POSTs keyed orders to target for d from four workers, a few
// hundred a second, and returns how many it sent. Each worker picks, at
// random: a new key; a retry of a recent key with the same body (a
// replay); a retry with another body (422); or a new key sent twice at
// once (one runs, the other gets 409 or the replay). The share of retries
// rises from 10% to 45% and back to 35% over the run, so the panels show
// a change over time.
// A transport error ends the run.
func Drive(ctx context.Context, target string, d time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	var sent atomic.Int64
	var recent ring
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				phase := time.Since(start).Seconds() / d.Seconds()
				retry := 0.1 + 0.35*math.Sin(0.75*math.Pi*phase)
				var err error
				switch p := mrand.Float64(); {
				case p < retry:
					if k, ok := recent.pick(); ok {
						err = post(ctx, client, target, k, body(1))
					}
				case p < retry+0.03:
					if k, ok := recent.pick(); ok {
						err = post(ctx, client, target, k, body(2))
					}
				case p < retry+0.08:
					k := newKey()
					var wg2 sync.WaitGroup
					var e1, e2 error
					wg2.Go(func() { e1 = post(ctx, client, target, k, body(1)) })
					wg2.Go(func() { e2 = post(ctx, client, target, k, body(1)) })
					wg2.Wait()
					err = firstErr(e1, e2)
					recent.add(k)
					sent.Add(1) // the pair's second request; the first counts below
				default:
					k := newKey()
					err = post(ctx, client, target, k, body(1))
					recent.add(k)
				}
				sent.Add(1)
				if err != nil && ctx.Err() == nil {
					errs <- err
					cancel()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	return sent.Load(), <-errs
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func body(quantity int) string {
	return fmt.Sprintf(`{"item":"book","quantity":%d}`, quantity)
}

func newKey() string { return rand.Text() }

// post sends one order and drains the answer; any status is fine.
func post(ctx context.Context, c *http.Client, target, key, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// ring holds the last 256 keys sent.
type ring struct {
	mu   sync.Mutex
	keys [256]string
	n    int
}

func (r *ring) add(k string) {
	r.mu.Lock()
	r.keys[r.n%len(r.keys)] = k
	r.n++
	r.mu.Unlock()
}

func (r *ring) pick() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return "", false
	}
	return r.keys[mrand.IntN(min(r.n, len(r.keys)))], true
}
