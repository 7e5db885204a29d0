package pgxstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	idem "github.com/idemkit/idem/core"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The common setup: a pool, the store, its table, an engine.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgxstore.New(pool, pgxstore.WithSweepInterval(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.CreateSchema(ctx); err != nil {
		log.Fatal(err)
	}

	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe(":8080", engine.Middleware()(mux)))
}

// The schema for a migration tool, instead of CreateSchema at start-up.
func ExampleSchema() {
	sql, err := pgxstore.Schema("idempotency_keys")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("migrations/0001_idempotency_keys.sql", []byte(sql), 0o644); err != nil {
		log.Fatal(err)
	}
}

// Exactly-once: the order and the idempotency record commit in one
// transaction, or neither does.
func ExampleStore_ExactlyOnce() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := pgxstore.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store.ExactlyOnce())
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		tx, _ := pgxstore.Tx(r.Context())
		var id int64
		err := tx.QueryRow(r.Context(),
			`INSERT INTO orders (amount) VALUES ($1) RETURNING id`, 4200).Scan(&id)
		if err != nil {
			// A 5xx rolls the transaction back and releases the key.
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		// Committed by the engine, with the record, before this is sent.
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	log.Fatal(http.ListenAndServe(":8080", engine.Middleware()(mux)))
}
