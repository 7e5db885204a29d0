package memstore_test

import (
	"context"
	"fmt"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The engine drives a store like this: the first request claims the key and
// completes it with its result; a retry with the same key gets that result
// back instead of a claim. The result is opaque to the store: the engine
// encodes the status and headers into its Head.
func Example() {
	s := memstore.New(memstore.WithMaxEntries(10_000))
	defer s.Close()

	ctx := context.Background()
	now := time.Now()
	first := store.Claim{
		Scope: idem.Scope("acme", "POST", "/orders"), Key: "order-1", Fingerprint: "fp", Token: "t1",
		Now: now, LeaseEnd: now.Add(5 * time.Minute),
	}
	res, _ := s.Claim(ctx, first)
	fmt.Println("first request acquired:", res.Acquired)

	done := store.Completion{
		Result:    store.Result{Head: []byte("head: 201, JSON"), Body: []byte(`{"id":1}`)},
		Now:       now,
		ExpiresAt: now.Add(24 * time.Hour),
	}
	if err := s.Complete(ctx, first.Hold(), done); err != nil {
		fmt.Println("complete:", err)
	}

	retry := first
	retry.Token, retry.Now, retry.LeaseEnd = "t2", now.Add(time.Second), now.Add(time.Second+5*time.Minute)
	res, _ = s.Claim(ctx, retry)
	fmt.Println("retry acquired:", res.Acquired)
	fmt.Printf("replay: %s %q %s\n", res.Existing.State, res.Existing.Result.Head, res.Existing.Result.Body)
	// Output:
	// first request acquired: true
	// retry acquired: false
	// replay: completed "head: 201, JSON" {"id":1}
}
