package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// The plaintext RunEncryption's handler answers with: no byte of it may
// reach the store.
const (
	secretCard = "4242 4242 4242 4242"
	secretName = "Ada Lovelace"
	secretBody = `{"card":"` + secretCard + `","name":"` + secretName + `"}`
)

// EncryptionKeys returns n deterministic test keys, "k1" to "kN". Never
// use them outside tests.
func EncryptionKeys(n int) []idem.EncryptionKey {
	keys := make([]idem.EncryptionKey, n)
	for i := range keys {
		keys[i] = idem.EncryptionKey{ID: "k" + string(rune('1'+i)), Secret: bytes.Repeat([]byte{byte(i + 1)}, 32)}
	}
	return keys
}

// RunEncryption checks idem.WithEncryption on a store: what the engine
// stores through it is unreadable in the raw store, still replays, keeps
// replaying after a key rotation, and fails closed (500, no second run)
// for an engine that lacks the key. raw returns every byte the store
// holds for the record of (scope, key), read directly (the row, the
// Redis value, the item), not through the Store interface.
func RunEncryption(t *testing.T, s store.Store, raw func(t *testing.T, scope, key string) []byte) {
	t.Helper()
	k := EncryptionKeys(3)
	runs := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Customer", secretName)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, secretBody)
	})
	engine := func(t *testing.T, keys ...idem.EncryptionKey) http.Handler {
		e, err := idem.New(s, idem.WithEncryption(keys...), idem.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		return e.Middleware()(handler)
	}
	key := "enc-" + rand.Text()
	scope := idem.Scope("", "POST", "")
	post := func(h http.Handler, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/pay", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	h1 := engine(t, k[0])
	if w := post(h1, `{"amount":10}`); w.Code != http.StatusCreated || w.Body.String() != secretBody {
		t.Fatalf("first request: %d %q", w.Code, w.Body)
	}
	t.Run("unreadable in the store", func(t *testing.T) {
		b := raw(t, scope, key)
		if len(b) == 0 {
			t.Fatal("raw returned nothing for the record")
		}
		for _, s := range []string{secretCard, secretName, `"amount":10`, idem.Fingerprint("POST", "/pay", []byte(`{"amount":10}`))} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("the store holds %q in the clear", s)
			}
		}
	})
	t.Run("replays", func(t *testing.T) {
		w := post(h1, `{"amount":10}`)
		if w.Code != http.StatusCreated || w.Body.String() != secretBody || w.Header().Get("X-Customer") != secretName || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry: %d %q %v", w.Code, w.Body, w.Header())
		}
		if w := post(h1, `{"amount":11}`); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("another body: %d, want 422", w.Code)
		}
	})
	t.Run("after a rotation", func(t *testing.T) {
		w := post(engine(t, k[0], k[1]), `{"amount":10}`)
		if w.Code != http.StatusCreated || w.Body.String() != secretBody {
			t.Errorf("retry under k1,k2: %d %q", w.Code, w.Body)
		}
	})
	t.Run("fails closed without the key", func(t *testing.T) {
		before := runs
		w := post(engine(t, k[1], k[2]), `{"amount":10}`)
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "record-unreadable") || runs != before {
			t.Errorf("retry under k2,k3: %d %q, handler runs %d→%d; want 500 record-unreadable and no run", w.Code, w.Body, before, runs)
		}
	})
	if runs != 1 {
		t.Errorf("the handler ran %d times, want 1", runs)
	}
}
