package idem

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestKeyValidator(t *testing.T) {
	onlyUUIDs := WithKeyValidator(func(k string) error {
		if len(k) != 36 || strings.Count(k, "-") != 4 {
			return errors.New("want a UUID")
		}
		return nil
	})
	e, _ := newEngine(t, newTestStore(), onlyUUIDs)
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) }))
	w := post(h, "/", "not-a-uuid", "")
	if w.Code != 400 || !strings.Contains(w.Body.String(), "invalid-key") || !strings.Contains(w.Body.String(), "want a UUID") || runs != 0 {
		t.Errorf("refused key: %d %s, %d runs", w.Code, w.Body, runs)
	}
	if w := post(h, "/", "123e4567-e89b-12d3-a456-426614174000", ""); w.Code != 201 {
		t.Errorf("a UUID: %d %s", w.Code, w.Body)
	}
	_, _, err := e.Do(context.Background(), Op{Kind: "job", Name: "n", Key: "nope"}, func(context.Context) ([]byte, error) { return nil, nil })
	if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), "want a UUID") {
		t.Errorf("Do with a refused key: %v", err)
	}
	if _, err := New(newTestStore(), WithKeyValidator(nil)); !errors.Is(err, ErrBadOption) {
		t.Errorf("nil validator: %v", err)
	}
}

func TestGlobalKeys(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []Option
		second int // the same key on another route
	}{
		{"scoped by route (default)", nil, 201},
		{"global, as Stripe", []Option{WithGlobalKeys()}, 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t, newTestStore(), tc.opts...)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
			mux.HandleFunc("POST /refunds", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
			h := e.Middleware()(mux)
			if w := post(h, "/orders", "k", "x"); w.Code != 201 {
				t.Fatalf("first: %d", w.Code)
			}
			if w := post(h, "/refunds", "k", "x"); w.Code != tc.second {
				t.Errorf("same key on another route: %d, want %d", w.Code, tc.second)
			}
			if w := post(h, "/orders", "k", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry on the first route: %d, want the replay", w.Code)
			}
		})
	}
}

func TestReplayedHeaders(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware(WithReplayedHeaders("x-order-id"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("X-Order-Id", "1")
		w.Header().Set("X-Internal-Trace", "secret")
		w.WriteHeader(201)
	}))
	post(h, "/", "k", "")
	w := post(h, "/", "k", "")
	got := w.Header()
	if got.Get("Idempotent-Replayed") != "true" || got.Get("Content-Type") != "application/json" || got.Get("Location") != "/orders/1" || got.Get("X-Order-Id") != "1" {
		t.Errorf("allowed headers missing from the replay: %v", got)
	}
	if got.Get("X-Internal-Trace") != "" {
		t.Errorf("a header outside the allowlist was replayed: %v", got)
	}
	badOptionPanic(t, func() { WithReplayedHeaders("bad header") })
}
