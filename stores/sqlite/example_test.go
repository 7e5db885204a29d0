package sqlitestore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	idem "github.com/idemkit/idem/core"
	sqlitestore "github.com/idemkit/idem/stores/sqlite"
)

// The common setup: a database file, the store, its table, an engine. A
// retry with the same key replays the first answer.
func Example() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "app.db")) // WAL, busy timeout, synchronous=FULL
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db) // sweeps expired records every minute
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.CreateSchema(context.Background()); err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}

	orders := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders)
	})
	srv := httptest.NewServer(engine.Middleware()(mux))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku":"A1"}`))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 order 1 replayed: false
	// 201 order 1 replayed: true
}

// Exactly-once: the order and the idempotency record commit in one
// transaction on the same database file, or neither does.
func ExampleTx() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.CreateSchema(context.Background()); err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store.ExactlyOnce())
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		tx, ok := sqlitestore.Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		res, err := tx.ExecContext(r.Context(), `INSERT INTO orders (sku) VALUES (?)`, "A1")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // rolled back, key released
			return
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", id)
	})
	srv := httptest.NewServer(engine.Middleware()(mux))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku":"A1"}`))
		req.Header.Set("Idempotency-Key", "order-A1-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	var n int
	db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// 201 order 1
	// 201 order 1
	// orders: 1
}

// The schema for a migration tool, instead of CreateSchema at start-up.
func ExampleSchema() {
	q, err := sqlitestore.Schema("idempotency_keys")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(q, `CREATE TABLE IF NOT EXISTS "idempotency_keys"`))
	// Output: true
}
