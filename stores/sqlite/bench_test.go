package sqlitestore

import (
	"bytes"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The benchmarks put the engine on this store next to the cheapest
// statements SQLite could answer with on the same database (Open's
// settings: WAL, synchronous=FULL, so every commit fsyncs), and next to
// the memory store under concurrency:
//
//	go test -run '^$' -bench . -benchtime 300x -count 6 | benchstat -
//
// BenchmarkRatio times the pairs alternately in one loop, so a shared
// machine's noise hits both alike, and reports the ratios of medians.

var (
	benchReq  = []byte(`{"customer":"cus_0123456789","sku":"A1","quantity":2}`)
	benchResp = []byte(`{"id":"ord_123","status":"paid","amount":4200}`)
)

func benchHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(benchResp)
}

// benchServer is the engine on s in front of benchHandler, called in
// process (no sockets), and the bare table a plain INSERT writes to.
func benchServer(b *testing.B, s store.Store) http.Handler {
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		b.Fatal(err)
	}
	return e.Middleware()(http.HandlerFunc(benchHandler))
}

func benchSQLite(b *testing.B) (*Store, http.Handler) {
	s := newStore(b, nil, WithSweepInterval(0))
	if _, err := s.db.ExecContext(b.Context(), `CREATE TABLE bare (k BLOB PRIMARY KEY, v BLOB NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return s, benchServer(b, s)
}

// post sends one request with key through h and checks the status.
func post(b *testing.B, h http.Handler, key string) {
	r := httptest.NewRequest("POST", "/orders", bytes.NewReader(benchReq))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

func bareInsert(b *testing.B, db *sql.DB, key string) {
	if _, err := db.ExecContext(b.Context(), `INSERT INTO bare (k, v) VALUES (?, ?)`, []byte(key), benchResp); err != nil {
		b.Fatal(err)
	}
}

func bareSelect(b *testing.B, db *sql.DB, key string) {
	var v []byte
	if err := db.QueryRowContext(b.Context(), `SELECT v FROM bare WHERE k = ?`, []byte(key)).Scan(&v); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkFirstRequest(b *testing.B) {
	_, h := benchSQLite(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		post(b, h, "k"+strconv.Itoa(i))
	}
}

func BenchmarkBareInsert(b *testing.B) {
	s, _ := benchSQLite(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bareInsert(b, s.db, "k"+strconv.Itoa(i))
	}
}

func BenchmarkReplay(b *testing.B) {
	_, h := benchSQLite(b)
	post(b, h, "same")
	b.ReportAllocs()
	for b.Loop() {
		post(b, h, "same")
	}
}

func BenchmarkBareSelect(b *testing.B) {
	s, _ := benchSQLite(b)
	bareInsert(b, s.db, "same")
	b.ReportAllocs()
	for b.Loop() {
		bareSelect(b, s.db, "same")
	}
}

// concurrent64 sends b.N first requests through h from 64 goroutines.
func concurrent64(b *testing.B, h http.Handler) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 { // open the pool's connections before timing
		wg.Go(func() { post(b, h, "warm-"+strconv.Itoa(i)) })
	}
	wg.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				post(b, h, "k"+strconv.FormatInt(i, 10))
			}
		})
	}
	wg.Wait()
}

// BenchmarkConcurrent64 is 64 clients sending first requests at once,
// on this store and on the memory store: ns/op is the inverse of the
// throughput.
func BenchmarkConcurrent64(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) {
		_, h := benchSQLite(b)
		concurrent64(b, h)
	})
	b.Run("store=memory", func(b *testing.B) {
		m := memstore.New()
		b.Cleanup(func() { m.Close() })
		concurrent64(b, benchServer(b, m))
	})
}

// BenchmarkRatio alternates a first request with a bare INSERT and a
// replay with a bare SELECT, and reports the ratios of the medians.
func BenchmarkRatio(b *testing.B) {
	s, h := benchSQLite(b)
	post(b, h, "same")
	bareInsert(b, s.db, "same")
	var tFirst, tInsert, tReplay, tSelect []time.Duration
	timed := func(into *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		timed(&tInsert, func() { bareInsert(b, s.db, key) })
		timed(&tFirst, func() { post(b, h, key) })
		if i%2 == 0 {
			timed(&tReplay, func() { post(b, h, "same") })
			timed(&tSelect, func() { bareSelect(b, s.db, "same") })
		} else {
			timed(&tSelect, func() { bareSelect(b, s.db, "same") })
			timed(&tReplay, func() { post(b, h, "same") })
		}
	}
	b.ReportMetric(float64(median(tFirst))/float64(median(tInsert)), "first/insert")
	b.ReportMetric(float64(median(tReplay))/float64(median(tSelect)), "replay/select")
	b.ReportMetric(float64(median(tInsert).Microseconds()), "µs-insert")
	b.ReportMetric(float64(median(tSelect).Microseconds()), "µs-select")
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkRatioExactlyOnce alternates a first request in exactly-once
// mode, whose handler inserts a row through the request's transaction,
// with the same bare INSERT on its own, and reports the ratio of the
// medians: what making that write exactly-once costs.
func BenchmarkRatioExactlyOnce(b *testing.B) {
	s, _ := benchSQLite(b)
	e, err := idem.New(s.ExactlyOnce(), idem.WithLogger(quietLog))
	if err != nil {
		b.Fatal(err)
	}
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := Tx(r.Context())
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO bare (k, v) VALUES (?, ?)`, []byte("tx-"+key), benchResp); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		benchHandler(w, r)
	}))
	var tFirst, tInsert []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		start := time.Now()
		bareInsert(b, s.db, key)
		tInsert = append(tInsert, time.Since(start))
		start = time.Now()
		post(b, h, key)
		tFirst = append(tFirst, time.Since(start))
	}
	b.ReportMetric(float64(median(tFirst))/float64(median(tInsert)), "first/insert")
}
