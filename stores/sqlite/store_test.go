package sqlitestore

import (
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

func TestNewBadOptions(t *testing.T) {
	db := newDB(t)
	plain, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db")) // no busy timeout
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	memory, err := sql.Open("sqlite", ":memory:?_pragma=busy_timeout(1000)")
	if err != nil {
		t.Fatal(err)
	}
	defer memory.Close()
	for _, tc := range []struct {
		name string
		db   *sql.DB
		opts []Option
		want string
	}{
		{"nil db", nil, nil, "nil *sql.DB"},
		{"empty table", db, []Option{WithTable("")}, "does not match"},
		{"table with a dash", db, []Option{WithTable("idem-keys")}, "does not match"},
		{"table with a quote", db, []Option{WithTable(`idem"keys`)}, "does not match"},
		{"table starting with a digit", db, []Option{WithTable("1keys")}, "does not match"},
		{"table of 65 characters", db, []Option{WithTable(strings.Repeat("k", 65))}, "does not match"},
		{"SQLite's own table", db, []Option{WithTable("sqlite_master")}, "reserves"},
		{"negative sweep interval", db, []Option{WithSweepInterval(-time.Second)}, "negative sweep interval"},
		{"no busy timeout", plain, nil, "no busy timeout"},
		{"in-memory database", memory, nil, "WAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.db, tc.opts...)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, ErrBadOption) || !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrBadOption (and idem.ErrBadOption) saying %q", err, tc.want)
			}
		})
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
		if db, err := Open(path); !errors.Is(err, ErrBadOption) {
			if db != nil {
				db.Close()
			}
			t.Errorf("Open(%q): %v, want ErrBadOption", path, err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
}

func TestOpenSettings(t *testing.T) {
	db := newDB(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal", "busy_timeout": "10000", "synchronous": "2", "foreign_keys": "1",
	} {
		var got string
		if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q (%v), want %q", pragma, got, err, want)
		}
	}
}

// TestNewSwitchesToWAL: New puts a file database in rollback-journal mode
// into WAL mode, which the file keeps.
func TestNewSwitchesToWAL(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "j.db")+"?_pragma=journal_mode(DELETE)&_pragma=busy_timeout(1000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(db, WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode string
	if err := db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q (%v), want wal", mode, err)
	}
}

// TestRestart: a completed record survives closing the store and the
// database and opening them again, and the retry replays it.
func TestRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "restart.db")
	var runs atomic.Int32
	serve := func() (*httptest.Server, func()) {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(db, WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSchema(t.Context()); err != nil {
			t.Fatal(err)
		}
		e, err := idem.New(s, idem.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.Header().Set("X-Run", string(rune('0'+n)))
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "order 1")
		})))
		return srv, func() { srv.Close(); s.Close(); db.Close() }
	}
	post := func(srv *httptest.Server) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "restart-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	srv, stop := serve()
	if resp, body := post(srv); resp.StatusCode != http.StatusCreated || body != "order 1" {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	stop()

	srv, stop = serve()
	defer stop()
	resp, body := post(srv)
	if resp.StatusCode != http.StatusCreated || body != "order 1" || resp.Header.Get("X-Run") != "1" ||
		resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the restart: %d %q %v; want the replay of the first answer", resp.StatusCode, body, resp.Header)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

// TestSweeper: the background sweeper deletes expired records, and Close
// stops it.
func TestSweeper(t *testing.T) {
	db := newDB(t)
	s := newStore(t, db, WithSweepInterval(0)) // sets the records up
	ctx := t.Context()
	past := time.Now().Add(-time.Hour)
	if res, err := s.Claim(ctx, claimAt("old", "t", past, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("claim: %v %v", res, err)
	}
	if err := s.Complete(ctx, hold("old", "t"), done("ok", past, past.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	live := claimAt("live", "t", time.Now(), time.Hour)
	if res, err := s.Claim(ctx, live); err != nil || !res.Acquired {
		t.Fatalf("claim: %v %v", res, err)
	}
	s = newStore(t, db, WithSweepInterval(10*time.Millisecond))
	count := func() int {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(s.Table())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; count() != 1 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d records, want the live one only", n)
	}
	s.Close()
	if err := s.Sweep(ctx, time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sweep after Close: %v, want ErrClosed", err)
	}
	if _, _, err := s.Watch(ctx, ref("live")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// TestCorruptRecord: a row this package cannot have written is reported
// as store.ErrCorruptRecord, never replayed: a completed row without a
// head (NULL or empty headers, no status), a state other than 1 or 2, an
// in-progress row without a lease end.
func TestCorruptRecord(t *testing.T) {
	s := newStore(t, nil)
	q := `INSERT INTO ` + quoteIdent(s.Table()) + ` (scope, "key", fingerprint, token, state, headers, body, created_at, lease_end, expires_at)
VALUES (?, ?, 'f', 't', ?, ?, 'b', 0, NULL, ?)`
	far := time.Now().Add(time.Hour).UnixMicro()
	for _, tc := range []struct {
		key   string
		state int
		head  any
	}{
		{"null-head", 2, nil},
		{"empty-head", 2, []byte{}},
		{"state-3", 3, []byte("h")},
		{"in-progress-without-lease", 1, nil},
	} {
		if _, err := s.db.ExecContext(t.Context(), q, []byte("s"), []byte(tc.key), tc.state, tc.head, far); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(t.Context(), claimAt(tc.key, "t2", time.Now(), time.Minute)); !errors.Is(err, store.ErrCorruptRecord) {
			t.Errorf("claim on %s: %v, want ErrCorruptRecord", tc.key, err)
		}
		if _, _, err := s.Get(t.Context(), ref(tc.key), time.Now()); !errors.Is(err, store.ErrCorruptRecord) {
			t.Errorf("get on %s: %v, want ErrCorruptRecord", tc.key, err)
		}
	}
}

// TestCompleteEmptyHead: Complete refuses a result without a head, which
// would read back as corrupt, and leaves the claim in progress.
func TestCompleteEmptyHead(t *testing.T) {
	s := newStore(t, nil)
	now := time.Now()
	if res, err := s.Claim(t.Context(), claimAt("k", "t", now, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("claim: %v %v", res, err)
	}
	c := done("body", now, now.Add(time.Hour))
	c.Result.Head = nil
	if err := s.Complete(t.Context(), hold("k", "t"), c); err == nil {
		t.Fatal("Complete without a head succeeded")
	}
	if rec, ok, err := s.Get(t.Context(), ref("k"), now); err != nil || !ok || rec.State != store.InProgress {
		t.Fatalf("record after the refused Complete: %+v %v %v, want the claim in progress", rec, ok, err)
	}
}

func TestSchema(t *testing.T) {
	q, err := Schema("")
	if err != nil || !strings.Contains(q, `CREATE TABLE IF NOT EXISTS "idempotency_keys"`) ||
		!strings.Contains(q, `"idempotency_keys_expires_at"`) {
		t.Fatalf("Schema(\"\"): %v\n%s", err, q)
	}
	if _, err := Schema("bad name"); !errors.Is(err, ErrBadOption) {
		t.Fatalf("Schema of a bad name: %v", err)
	}
	// CreateSchema twice, and a custom table beside the default one.
	db := newDB(t)
	s := newStore(t, db)
	if err := s.CreateSchema(t.Context()); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	other := newStore(t, db, WithTable("other_keys"))
	c := claimAt("k", "t", time.Now(), time.Minute)
	for _, st := range []*Store{s, other} {
		if res, err := st.Claim(t.Context(), c); err != nil || !res.Acquired {
			t.Fatalf("claim in %s: %v %v; tables must be separate", st.Table(), res, err)
		}
	}
}

// TestTwoStoresOneFile: two stores on two pools of one file (as two
// processes on one host would be) race for the same keys: each key is
// taken exactly once, and neither meets SQLITE_BUSY.
func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	var stores [2]*Store
	for i := range stores {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		stores[i] = newStore(t, db)
	}
	now := time.Now()
	const keys, racers = 8, 8
	var acquired [keys]atomic.Int32
	errs := make(chan error, 2*keys*racers)
	var wg sync.WaitGroup
	for i := range 2 * racers {
		s := stores[i%2]
		wg.Go(func() {
			for k := range keys {
				res, err := s.Claim(t.Context(), claimAt(strconv.Itoa(k), strconv.Itoa(i), now, time.Minute))
				if err != nil {
					errs <- err
					continue
				}
				if res.Acquired {
					acquired[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("claim: %v", err)
	}
	for k := range acquired {
		if n := acquired[k].Load(); n != 1 {
			t.Errorf("key %d taken %d times, want once", k, n)
		}
	}
}

// TestOpenCreatesPrivateFiles: the database Open creates, and the WAL and
// shared-memory files SQLite makes beside it, are readable by their owner
// only: they hold the stored responses.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), m)
		}
	}
}
