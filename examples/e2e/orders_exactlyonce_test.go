package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// TestExactlyOnceOrders runs the orders examples with -exactly-once: the
// order and payment rows are written through the request's transaction,
// so a replay, a duplicate running beside it, a rejected request and a
// payment on a missing order leave exactly the rows they report.
func TestExactlyOnceOrders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ store, example string }{{"postgres", "chi"}, {"mysql", "gin"}, {"sqlite", "echo"}, {"postgres", "fiber"}} {
		t.Run(tc.store+"/"+tc.example, func(t *testing.T) {
			t.Parallel()
			args := storeArgs(t, tc.store)
			p := start(t, tc.example, append(args, "-exactly-once")...)
			table := args[len(args)-1]
			rows := rowCounter(t, tc.store, args[3], table)

			item := "book-" + randomName()
			order := fmt.Sprintf(`{"item":%q,"quantity":2}`, item)
			a := call(t, "POST", p.url+"/orders", "eo-"+item, order)
			b := call(t, "POST", p.url+"/orders", "eo-"+item, order)
			if a.code != 201 || !b.replayed() || a.body != b.body {
				t.Fatalf("order %d %q, retry %d %q replayed=%v", a.code, a.body, b.code, b.body, b.replayed())
			}
			if n := rows("_orders", "item = "+quote(tc.store, item)); n != 1 {
				t.Errorf("%d order rows after a replay, want 1", n)
			}

			// Ten duplicates at once: one runs, the others wait or get 409.
			dup := "dup-" + item
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() { call(t, "POST", p.url+"/orders", "eo-dup-"+item, fmt.Sprintf(`{"item":%q,"quantity":1}`, dup)) })
			}
			wg.Wait()
			if n := rows("_orders", "item = "+quote(tc.store, dup)); n != 1 {
				t.Errorf("%d order rows from ten duplicates, want 1", n)
			}

			var o struct{ ID string }
			json.Unmarshal([]byte(a.body), &o)
			pay := call(t, "POST", p.url+"/orders/"+o.ID+"/payments", "pay-"+item, `{"amount":12.5}`)
			again := call(t, "POST", p.url+"/orders/"+o.ID+"/payments", "pay-"+item, `{"amount":12.5}`)
			if pay.code != 201 || !again.replayed() {
				t.Errorf("payment %d %q, retry %d replayed=%v", pay.code, pay.body, again.code, again.replayed())
			}
			if r := call(t, "POST", p.url+"/orders/ord_999999999/payments", "pay-none-"+item, `{"amount":1}`); r.code != 404 {
				t.Errorf("payment on a missing order: %d %q", r.code, r.body)
			}
			if n := rows("_payments", "amount = 12.5"); n != 1 {
				t.Errorf("%d payment rows, want 1", n)
			}
			if r := call(t, "GET", p.url+"/orders/"+o.ID, "", ""); r.code != 200 {
				t.Errorf("GET the order: %d %q", r.code, r.body)
			}
		})
	}
}

// rowCounter returns a function counting the rows of table+suffix that
// match where, in the database at addr.
func rowCounter(t *testing.T, store, addr, table string) func(suffix, where string) int {
	return func(suffix, where string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var n int
		q := "SELECT count(*) FROM " + table + suffix + " WHERE " + where
		if store == "mysql" || store == "sqlite" {
			db, err := sql.Open(store, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		}
		conn, err := pgx.Connect(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
}

// quote is a string literal in the store's SQL (test data only: letters,
// digits and dashes).
func quote(_ string, s string) string { return "'" + s + "'" }

// TestSQLiteSurvivesRestart: records kept with -store sqlite survive the
// process: killed after answering, restarted on the same file, the
// example replays the answer instead of running the request again.
func TestSQLiteSurvivesRestart(t *testing.T) {
	t.Parallel()
	args := storeArgs(t, "sqlite")
	p := start(t, "chi", args...)
	order := `{"item":"lamp","quantity":1}`
	first := call(t, "POST", p.url+"/orders", "restart-1", order)
	if first.code != 201 {
		t.Fatalf("first: %d %q", first.code, first.body)
	}
	p.kill() // SIGKILL: no shutdown, nothing flushed on the way out
	q := start(t, "chi", args...)
	retry := call(t, "POST", q.url+"/orders", "restart-1", order)
	if !retry.replayed() || retry.body != first.body {
		t.Errorf("after a restart: %d %q replayed=%v, want the replay of %q", retry.code, retry.body, retry.replayed(), first.body)
	}
}
