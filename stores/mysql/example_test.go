package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"

	idem "github.com/idemkit/idem/core"
	mysqlstore "github.com/idemkit/idem/stores/mysql"
)

// The common setup: a pool, the store, its table, an engine.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN")) // e.g. app:secret@tcp(db:3306)/app
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	store, err := mysqlstore.New(db) // sweeps expired records every minute
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
	// Keep every body the middleware keeps: below what
	// max_allowed_packet lets the store write, less room for headers.
	limit := idem.WithMaxResponseBody(min(4<<20, store.MaxResponseSize()-64<<10))
	log.Fatal(http.ListenAndServe(":8080", engine.Middleware(limit)(mux)))
}

// The schema for a migration tool, instead of CreateSchema at start-up.
func ExampleSchema() {
	sql, err := mysqlstore.Schema("idempotency_keys")
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
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(50) // one connection per request in flight is enough
	store, err := mysqlstore.New(db, mysqlstore.WithSweepInterval(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store.ExactlyOnce())
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		tx := mysqlstore.Tx(r.Context())
		res, err := tx.ExecContext(r.Context(), `INSERT INTO orders (amount) VALUES (?)`, 4200)
		if err != nil {
			// A 5xx rolls the transaction back and releases the key.
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		id, _ := res.LastInsertId()
		// Committed by the engine, with the record, before this is sent.
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	// Keep every body the middleware keeps: below what
	// max_allowed_packet lets the store write, less room for headers.
	limit := idem.WithMaxResponseBody(min(4<<20, store.MaxResponseSize()-64<<10))
	log.Fatal(http.ListenAndServe(":8080", engine.Middleware(limit)(mux)))
}

// The schema for a table name of your own.
func ExampleSchema_tableName() {
	sql, _ := mysqlstore.Schema("idem_keys")
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(line, "CREATE") || strings.Contains(line, "KEY") {
			fmt.Print(line)
		}
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS `idem_keys` (
	//     PRIMARY KEY (scope, `key`),
	//     KEY expires_at_idx (expires_at)
}
