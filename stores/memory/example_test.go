package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The engine drives a store like this: the first request claims the key and
// completes it with its response; a retry with the same key gets that
// response back instead of a claim.
func Example() {
	store := memstore.New(memstore.WithMaxEntries(10_000))
	defer store.Close()

	ctx := context.Background()
	now := time.Now()
	scope := idem.Scope("acme", "POST", "/orders")

	first, _ := store.Claim(ctx, idem.Claim{
		Scope: scope, Key: "order-1", Fingerprint: "fp", Token: "t1",
		Now: now, LeaseEnd: now.Add(5 * time.Minute),
	})
	fmt.Println("first request acquired:", first.Acquired)

	resp := idem.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"id":1}`),
	}
	if err := store.Complete(ctx, scope, "order-1", "t1", resp, now, now.Add(24*time.Hour)); err != nil {
		fmt.Println("complete:", err)
	}

	retry, _ := store.Claim(ctx, idem.Claim{
		Scope: scope, Key: "order-1", Fingerprint: "fp", Token: "t2",
		Now: now.Add(time.Second), LeaseEnd: now.Add(time.Second + 5*time.Minute),
	})
	fmt.Println("retry acquired:", retry.Acquired)
	fmt.Println("replay:", retry.Existing.State, retry.Existing.Response.Status, string(retry.Existing.Response.Body))
	// Output:
	// first request acquired: true
	// retry acquired: false
	// replay: completed 201 {"id":1}
}
