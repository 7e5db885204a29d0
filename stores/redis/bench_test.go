package redisstore

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// The benchmarks put the Store's steps next to the cheapest command that
// could guard a key, a bare SET key value NX PX, on the same client in the
// same process. Compare them as ratios (or with benchstat):
//
//	go test -run '^$' -bench . -benchtime 2000x -count 5
//
// Targets: ClaimComplete at most 2.2 times SetNXPX, Replay at most 1.2.
// BenchmarkReplicasRatios prices WithReplicas the same way, against a
// private primary and replica.

var benchResp = store.Result{
	Head: httpHead(http.StatusCreated, http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/42"}}),
	Body: []byte(`{"id":42,"item":"book","quantity":1,"status":"created","total":"12.50"}`),
}

const benchLease = 5 * time.Minute

// BenchmarkSetNXPX is the baseline: one SET key value NX PX per new key.
func BenchmarkSetNXPX(b *testing.B) {
	client := testClient(b)
	prefix := randomPrefix()
	b.Cleanup(func() { _ = deletePrefix(context.Background(), client, prefix) })
	ctx := context.Background()
	// A lease that is not whole seconds makes go-redis send PX, not EX.
	ttl := benchLease + time.Millisecond
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ok, err := client.SetNX(ctx, prefix+strconv.Itoa(i), "fingerprint", ttl).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkClaimComplete is a first request: Claim a new key, then
// Complete it with a small response.
func BenchmarkClaimComplete(b *testing.B) {
	client := testClient(b)
	s := newTestStore(b, client)
	warmUp(b, s)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := strconv.Itoa(i)
		now := time.Now()
		res, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: key, Fingerprint: "fingerprint", Token: "token", Now: now, LeaseEnd: now.Add(benchLease)})
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if err := s.Complete(ctx, holdOf("bench", key, "token"), completion(benchResp, now, now.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay is a retry: Claim a completed key and get its response.
func BenchmarkReplay(b *testing.B) {
	client := testClient(b)
	s := newTestStore(b, client)
	warmUp(b, s)
	ctx := context.Background()
	now := time.Now()
	if _, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token", Now: now, LeaseEnd: now.Add(benchLease)}); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, holdOf("bench", "done", "token"), completion(benchResp, now, now.Add(time.Hour))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		res, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token2", Now: now, LeaseEnd: now.Add(benchLease)})
		if err != nil || res.Existing == nil || len(res.Existing.Result.Head) == 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkRatios interleaves the three operations above in one loop and
// reports the ratios of their median latencies, so that load from other
// processes, which comes and goes, weighs on all three alike. This is the
// figure to quote from a shared machine. 2set/set, two SETs in a row, is
// the floor for a first request, which needs two round trips. The order of
// the operations rotates from one iteration to the next.
func BenchmarkRatios(b *testing.B) {
	client := testClient(b)
	s := newTestStore(b, client)
	setPrefix := s.prefix + "set:"
	warmUp(b, s)
	ctx := context.Background()
	now := time.Now()
	if _, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token", Now: now, LeaseEnd: now.Add(benchLease)}); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, holdOf("bench", "done", "token"), completion(benchResp, now, now.Add(time.Hour))); err != nil {
		b.Fatal(err)
	}
	var set, first, replay, set2 []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := strconv.Itoa(i)
		ops := []func(){
			func() {
				t0 := time.Now()
				if ok, err := client.SetNX(ctx, setPrefix+key, "fingerprint", benchLease+time.Millisecond).Result(); err != nil || !ok {
					b.Fatal(ok, err)
				}
				set = append(set, time.Since(t0))
			},
			func() {
				t0 := time.Now()
				res, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: key, Fingerprint: "fingerprint", Token: "token", Now: t0, LeaseEnd: t0.Add(benchLease)})
				if err != nil || !res.Acquired {
					b.Fatal(res, err)
				}
				if err := s.Complete(ctx, holdOf("bench", key, "token"), completion(benchResp, t0, t0.Add(time.Hour))); err != nil {
					b.Fatal(err)
				}
				first = append(first, time.Since(t0))
			},
			func() {
				t0 := time.Now()
				res, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token2", Now: t0, LeaseEnd: t0.Add(benchLease)})
				if err != nil || res.Existing == nil || len(res.Existing.Result.Head) == 0 {
					b.Fatal(res, err)
				}
				replay = append(replay, time.Since(t0))
			},
			// The floor for a first request: two round trips of the
			// cheapest command.
			func() {
				t0 := time.Now()
				for _, suffix := range []string{"a", "b"} {
					if ok, err := client.SetNX(ctx, setPrefix+key+suffix, "fingerprint", benchLease+time.Millisecond).Result(); err != nil || !ok {
						b.Fatal(ok, err)
					}
				}
				set2 = append(set2, time.Since(t0))
			},
		}
		// Rotate the order, so that no operation always follows the same
		// one.
		for j := range ops {
			ops[(i+j)%len(ops)]()
		}
	}
	ms, mf, mr := median(set), median(first), median(replay)
	b.ReportMetric(float64(ms.Nanoseconds()), "set-median-ns")
	b.ReportMetric(float64(mf)/float64(ms), "first/set")
	b.ReportMetric(float64(mr)/float64(ms), "replay/set")
	b.ReportMetric(float64(median(set2))/float64(ms), "2set/set")
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkReplicasRatios interleaves, on a private primary with one
// replica, a first request (Claim, then Complete) and a replay through a
// Store without WithReplicas and through one with WithReplicas(1, 1s),
// and reports the ratios of their median latencies: what waiting for the
// replica costs on top of the same round trips.
func BenchmarkReplicasRatios(b *testing.B) {
	rs := startReplicated(b)
	plain := newTestStore(b, rs.client, noFailover)
	synced := newTestStore(b, rs.client, noFailover, WithReplicas(1, time.Second))
	ctx := context.Background()
	stores := []*Store{plain, synced}
	for _, s := range stores {
		warmUp(b, s)
		now := time.Now()
		if _, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token", Now: now, LeaseEnd: now.Add(benchLease)}); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, holdOf("bench", "done", "token"), completion(benchResp, now, now.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
	}
	first := make([][]time.Duration, 2)
	replay := make([][]time.Duration, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := strconv.Itoa(i)
		for j := range stores {
			k := (i + j) % 2 // alternate which store goes first
			s := stores[k]
			t0 := time.Now()
			res, err := s.Claim(ctx, store.Claim{Scope: "bench", Key: key, Fingerprint: "fingerprint", Token: "token", Now: t0, LeaseEnd: t0.Add(benchLease)})
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			if err := s.Complete(ctx, holdOf("bench", key, "token"), completion(benchResp, t0, t0.Add(time.Hour))); err != nil {
				b.Fatal(err)
			}
			first[k] = append(first[k], time.Since(t0))
			t0 = time.Now()
			res, err = s.Claim(ctx, store.Claim{Scope: "bench", Key: "done", Fingerprint: "fingerprint", Token: "token2", Now: t0, LeaseEnd: t0.Add(benchLease)})
			if err != nil || res.Existing == nil {
				b.Fatal(res, err)
			}
			replay[k] = append(replay[k], time.Since(t0))
		}
	}
	b.ReportMetric(float64(median(first[0]).Nanoseconds()), "first-median-ns")
	b.ReportMetric(float64(median(first[1]))/float64(median(first[0])), "first-replicas/first")
	b.ReportMetric(float64(median(replay[1]))/float64(median(replay[0])), "replay-replicas/replay")
}

// BenchmarkReplayCacheRatios interleaves, through the net/http
// middleware, a replay from Redis, a replay from the engine's replay
// cache (idem.WithReplayCache) and the bare handler, and reports the
// ratios of their median latencies to the bare handler's.
func BenchmarkReplayCacheRatios(b *testing.B) {
	client := testClient(b)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(benchResp.Body)
	})
	quiet := idem.WithLogger(slog.New(slog.DiscardHandler))
	plain, err := idem.New(newTestStore(b, client), quiet)
	if err != nil {
		b.Fatal(err)
	}
	cached, err := idem.New(newTestStore(b, client), quiet, idem.WithReplayCache(1<<20, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	hs := []http.Handler{handler, plain.Middleware()(handler), cached.Middleware()(handler)}
	call := func(h http.Handler) time.Duration {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "replayed")
		t0 := time.Now()
		h.ServeHTTP(httptest.NewRecorder(), r)
		return time.Since(t0)
	}
	for _, h := range hs[1:] {
		call(h) // the first request, stored
		call(h) // the cache learns it
	}
	lat := make([][]time.Duration, len(hs))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range hs {
			k := (i + j) % len(hs)
			lat[k] = append(lat[k], call(hs[k]))
		}
	}
	bare := median(lat[0])
	b.ReportMetric(float64(median(lat[1]))/float64(bare), "store-replay/bare")
	b.ReportMetric(float64(median(lat[2]))/float64(bare), "cache-replay/bare")
}
