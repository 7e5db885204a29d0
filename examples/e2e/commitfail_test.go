package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idemclient "github.com/idemkit/idem/client"
	idem "github.com/idemkit/idem/core"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCommitFailureIsRetriedByTheClient: in exactly-once mode a COMMIT
// that PostgreSQL refuses (here a deferred foreign key the handler's first
// run violates) releases the key; the server must answer so that
// idemclient, our own client, retries with the same key, and the retry
// then succeeds. A 500 would end the client's request with a failure
// where "retry with the same key" was the right move.
func TestCommitFailureIsRetriedByTheClient(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, reachable(t, "IDEM_TEST_POSTGRES_URL", postgresDefault))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	name := "idem_e2e_commit_" + randomName()
	parents, children := name+"_parent", name+"_child"
	for _, q := range []string{
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, parents),
		fmt.Sprintf(`CREATE TABLE %s (key text PRIMARY KEY, parent int REFERENCES %s (id) DEFERRABLE INITIALLY DEFERRED)`, children, parents),
		fmt.Sprintf(`INSERT INTO %s VALUES (1)`, parents),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	store, err := pgxstore.New(pool, pgxstore.WithTable(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		store.Close()
		pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s`, children, parents, name))
	})
	if err := store.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(store.ExactlyOnce(), idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := httptest.NewServer(engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parent := 1
		if runs.Add(1) == 1 {
			parent = 2 // no such parent: the deferred check fails at COMMIT
		}
		tx, _ := pgxstore.Tx(r.Context())
		if _, err := tx.Exec(r.Context(), fmt.Sprintf(`INSERT INTO %s VALUES ($1, $2)`, children), r.Header.Get("Idempotency-Key"), parent); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "created")
	})))
	t.Cleanup(srv.Close)

	client, err := idemclient.NewClient(idemclient.WithMaxAttempts(4), idemclient.WithBackoff(10*time.Millisecond, 100*time.Millisecond), idemclient.WithRetryAfterCap(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(srv.URL+"/payments", "application/json", strings.NewReader(`{"amount":42}`))
	if err != nil {
		t.Fatalf("the client gave up: %v", err)
	}
	defer resp.Body.Close()
	r, _ := idemclient.ResultOf(resp)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the client ended with %d after %d attempts, want 201 after retrying the failed commit", resp.StatusCode, r.Attempts)
	}
	if r.Attempts != 2 || runs.Load() != 2 {
		t.Errorf("attempts %d, handler runs %d; want 2 and 2 (the failed commit released the key, the retry ran)", r.Attempts, runs.Load())
	}
	var n int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, children)).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows committed (%v), want exactly 1", n, err)
	}
}
