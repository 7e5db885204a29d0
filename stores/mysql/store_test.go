package mysqlstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

func TestLifecycle(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k1", "fp1", "tok1", t0, time.Minute)

	res, err := s.Claim(ctx, c)
	if err != nil || !res.Acquired || res.Existing != nil {
		t.Fatalf("first claim = %+v, %v; want acquired", res, err)
	}
	res, err = s.Claim(ctx, claimAt("k1", "fp2", "tok2", t0.Add(time.Second), time.Minute))
	if err != nil || res.Acquired {
		t.Fatalf("second claim = %+v, %v; want existing", res, err)
	}
	ex := res.Existing
	if ex.State != store.InProgress || ex.Fingerprint != "fp1" || !ex.CreatedAt.Equal(t0) ||
		!ex.LeaseEnd.Equal(t0.Add(time.Minute)) || !ex.ExpiresAt.Equal(t0.Add(time.Minute)) || !reflect.DeepEqual(ex.Result, store.Result{}) {
		t.Fatalf("existing = %+v", ex)
	}

	// The store keeps the result's bytes as they are, whatever they hold.
	resp := result("\x01\x00head\xff\x00", `{"id":1}`)
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "wrong"), completeAt(resp, t0.Add(time.Second), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("complete with wrong token: %v", err)
	}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok1"), completeAt(resp, t0.Add(time.Second), t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok1"), completeAt(resp, t0.Add(time.Second), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second complete: %v", err)
	}
	if err := s.Release(ctx, hold(c.Scope, c.Key, "tok1")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release of completed: %v", err)
	}
	res, err = s.Claim(ctx, claimAt("k1", "fp1", "tok3", t0.Add(2*time.Minute), time.Minute))
	if err != nil || res.Acquired {
		t.Fatalf("replay claim = %+v, %v", res, err)
	}
	ex = res.Existing
	if ex.State != store.Completed || !ex.LeaseEnd.IsZero() || !ex.ExpiresAt.Equal(t0.Add(time.Hour)) || !reflect.DeepEqual(ex.Result, resp) {
		t.Fatalf("replay existing = %+v %+v", ex, ex.Result)
	}
	got, ok, err := s.Get(ctx, c.Ref(), t0.Add(time.Hour-time.Microsecond))
	if err != nil || !ok || !reflect.DeepEqual(got.Result, resp) {
		t.Fatalf("get = %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.Get(ctx, c.Ref(), t0.Add(time.Hour)); ok {
		t.Fatal("get at expiry found the record")
	}
	// Expired: a new claim takes it over.
	res, err = s.Claim(ctx, claimAt("k1", "fp9", "tok9", t0.Add(time.Hour), time.Minute))
	if err != nil || !res.Acquired {
		t.Fatalf("claim after expiry = %+v, %v", res, err)
	}
	got, _, _ = s.Get(ctx, c.Ref(), t0.Add(time.Hour))
	if got.State != store.InProgress || got.Fingerprint != "fp9" || !reflect.DeepEqual(got.Result, store.Result{}) || !got.CreatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after takeover = %+v", got)
	}
	if err := s.Release(ctx, hold(c.Scope, c.Key, "tok1")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release with old token: %v", err)
	}
	if err := s.Release(ctx, hold(c.Scope, c.Key, "tok9")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, c.Ref(), t0.Add(time.Hour)); ok {
		t.Fatal("record survived release")
	}
}

func TestNilAndEmptyResultParts(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i, resp := range []store.Result{
		{Head: []byte{1}},
		{Head: []byte{0}, Body: []byte{}},
		{Head: []byte("\x01\x00\xff"), Body: []byte{0}},
		{Head: []byte("head"), BodyOmitted: true},
	} {
		c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Minute)
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok"), completeAt(resp, t0, t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Get(ctx, c.Ref(), t0)
		if err != nil || !reflect.DeepEqual(got.Result, resp) {
			t.Errorf("%d: got %#v, %v; want %#v", i, got.Result, err, resp)
		}
	}
}

func TestAbandonedLeaseAndExtend(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "a", t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "b"), t0, t0.Add(2*time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("extend with wrong token: %v", err)
	}
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(30*time.Second), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Extending to the lease end it already has changes no column; it
	// still succeeds.
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(40*time.Second), t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("extend to the same lease end: %v", err)
	}
	// Not yet abandoned at the old lease end.
	if res, _ := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(time.Minute), time.Minute)); res.Acquired {
		t.Fatal("claim took an extended lease")
	}
	// At and past the lease end, nobody having taken the key over, the
	// claim is still the token's: a late Extend lands.
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(3*time.Minute), t0.Add(4*time.Minute)); err != nil {
		t.Fatalf("extend after the lease end: %v", err)
	}
	res, err := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(4*time.Minute), time.Minute))
	if err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v, %v", res, err)
	}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "a"), completeAt(okResult, t0.Add(4*time.Minute), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner completed after takeover: %v", err)
	}
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(4*time.Minute), t0.Add(5*time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner extended after takeover: %v", err)
	}
	// The new owner completes past its own lease end: late, but it lands.
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "b"), completeAt(okResult, t0.Add(6*time.Minute), t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
}

func TestSubMicrosecondTimes(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	now := t0.Add(500 * time.Nanosecond)
	c := store.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "t", Now: now, LeaseEnd: now.Add(time.Second)}
	if res, _ := s.Claim(ctx, c); !res.Acquired {
		t.Fatal("not acquired")
	}
	// One nanosecond before the lease end the claim is still held ...
	if res, _ := s.Claim(ctx, store.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "u", Now: c.LeaseEnd.Add(-time.Nanosecond), LeaseEnd: c.LeaseEnd.Add(time.Minute)}); res.Acquired {
		t.Fatal("claim before lease end acquired")
	}
	// ... and a microsecond after it, it is gone.
	if res, _ := s.Claim(ctx, store.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "u", Now: c.LeaseEnd.Add(time.Microsecond), LeaseEnd: c.LeaseEnd.Add(time.Minute)}); !res.Acquired {
		t.Fatal("claim after lease end not acquired")
	}
}

// Scopes are opaque bytes; long ones are hashed into the key without
// colliding, even when they share their first 512 bytes.
func TestOpaqueScope(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	long := strings.Repeat("s", maxScope)
	scopes := []string{"", "\x00", "\x00\x01", "\xff\xfe", "é", "e\u0301", "trailing ", "trailing",
		long, long + "a", long + "b", long + "ab", long[:maxScope-1], strings.Repeat("\xff", 5000)}
	for i, scope := range scopes {
		res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: "k", Fingerprint: fmt.Sprint("\x00fp\xff", i), Token: "\x00", Now: t0, LeaseEnd: t0.Add(time.Minute)})
		if err != nil || !res.Acquired {
			t.Fatalf("%d %.20q: %+v %v", i, scope, res, err)
		}
	}
	for i, scope := range scopes {
		rec, ok, err := s.Get(ctx, ref(scope, "k"), t0)
		if err != nil || !ok || rec.Fingerprint != fmt.Sprint("\x00fp\xff", i) {
			t.Fatalf("%d %.20q: %+v %v %v", i, scope, rec, ok, err)
		}
	}
	if err := s.Release(ctx, hold(long+"a", "k", "\x00")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, ref(long+"b", "k"), t0); !ok {
		t.Fatal("released the wrong scope")
	}
	if _, ok, _ := s.Get(ctx, ref(long+"a", "k"), t0); ok {
		t.Fatal("release of a long scope did nothing")
	}
}

// Values that do not fit a column are refused before anything is sent,
// whatever the server's SQL mode would do with them.
func TestLimits(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for _, c := range []store.Claim{
		claimAt(strings.Repeat("k", 256), "fp", "t", t0, time.Minute),
		claimAt("k", "fp", strings.Repeat("t", 256), t0, time.Minute),
		claimAt("k", strings.Repeat("f", 1<<16), "t", t0, time.Minute),
	} {
		if _, err := s.Claim(ctx, c); err == nil {
			t.Errorf("claim with a %d-byte key, %d-byte token, %d-byte fingerprint succeeded", len(c.Key), len(c.Token), len(c.Fingerprint))
		}
	}
	c := claimAt(strings.Repeat("k", 255), strings.Repeat("f", 1<<16-1), strings.Repeat("t", 255), t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatalf("claim at the limits: %+v %v", res, err)
	}
	// A head is 1 to store.MaxHead bytes: an empty one would read back
	// as corrupt, and a longer one is never passed by the engine.
	for _, n := range []int{0, store.MaxHead + 1} {
		res := store.Result{Head: make([]byte, n)}
		if err := s.Complete(ctx, c.Hold(), completeAt(res, t0, t0.Add(time.Hour))); err == nil || errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("complete with a head of %d bytes: %v", n, err)
		}
	}
	head := []byte(strings.Repeat("h", store.MaxHead))
	if err := s.Complete(ctx, c.Hold(), completeAt(store.Result{Head: head}, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if rec, ok, err := s.Get(ctx, c.Ref(), t0); err != nil || !ok || rec.Fingerprint != c.Fingerprint || !bytes.Equal(rec.Result.Head, head) {
		t.Fatalf("get at the limits: %v %v", ok, err)
	}
}

func TestDeleteAndDeleteExpired(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i := range 2500 {
		c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Duration(i+1)*time.Millisecond)
		if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	scope := idem.Scope("", "POST", "/orders")
	ok, err := s.Delete(ctx, ref(scope, "k0"))
	if err != nil || !ok {
		t.Fatalf("delete = %v, %v", ok, err)
	}
	ok, err = s.Delete(ctx, ref(scope, "k0"))
	if err != nil || ok {
		t.Fatalf("second delete = %v, %v", ok, err)
	}
	// Leases end at t0+1ms ... t0+2500ms; k0 is gone. An abandoned claim
	// is removed a lease after its lease end, at t0+2ms ... t0+5000ms: at
	// t0+4000ms, 1999 are (k1..k1999): two batches.
	n, err := s.DeleteExpired(ctx, t0.Add(4000*time.Millisecond))
	if err != nil || n != 1999 {
		t.Fatalf("DeleteExpired = %d, %v; want 1999", n, err)
	}
	if left := count(t, s); left != 500 {
		t.Fatalf("left = %d", left)
	}
}

// A row that this package cannot have written (changed by hand, by a
// migration gone wrong) is refused with ErrCorruptRecord, not replayed.
// What a head holds is the engine's to check (TestEngineCorruptRecord).
func TestCorruptRecord(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i, tc := range []struct {
		name  string
		state int // of the record before corruption
		set   string
	}{
		{"state 0", 1, "state = 0"},
		{"state 3", 2, "state = 3"},
		{"state -1", 1, "state = -1"},
		{"in progress without lease end", 1, "lease_end = NULL"},
		{"completed without head", 2, "headers = NULL"},
		{"completed with an empty head", 2, "headers = X''"},
		{"completed without head nor body", 2, "headers = NULL, body = NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if tc.state == 2 {
				if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok"), completeAt(result("\x01head", "body"), t0, t0.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.db.ExecContext(ctx, "UPDATE "+quoteIdent(s.table)+" SET "+tc.set+" WHERE `key` = ?", c.Key); err != nil {
				t.Fatal(err)
			}
			_, err := s.Claim(ctx, claimAt(c.Key, "fp", "other", t0.Add(time.Second), time.Minute))
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Errorf("claim = %v, want ErrCorruptRecord", err)
			}
			if _, _, err := s.Get(ctx, c.Ref(), t0.Add(time.Second)); !errors.Is(err, store.ErrCorruptRecord) {
				t.Errorf("get = %v, want ErrCorruptRecord", err)
			}
			t.Log(err)
		})
	}
}

// The engine answers a retry whose record is corrupt with 503, and does
// not run the handler again: a row the store refuses, and a head the
// engine cannot read (in the store's format, or in the format of rows
// written before results were opaque: an HTTP status and header bytes).
func TestEngineCorruptRecord(t *testing.T) {
	s := newStore(t, nil)
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(key string) int {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i, set := range []string{
		"state = 3",
		"headers = NULL",
		"headers = X'ff'",
		"status = 700",
		"status = 0, headers = NULL",
		"status = 199, headers = NULL",
		"status = 600, headers = NULL",
		"status = 200, headers = X'02'",
		"status = 200, headers = X'0101'",
	} {
		key := fmt.Sprint("k", i)
		if code := post(key); code != http.StatusCreated {
			t.Fatalf("first request: %d", code)
		}
		if _, err := s.db.ExecContext(t.Context(), "UPDATE "+quoteIdent(s.table)+" SET "+set+" WHERE `key` = ?", key); err != nil {
			t.Fatal(err)
		}
		if code := post(key); code != http.StatusServiceUnavailable {
			t.Errorf("retry with a corrupt record (%s): %d, want 503", set, code)
		}
		if runs != i+1 {
			t.Fatalf("%s: handler ran %d times for %d keys", set, runs, i+1)
		}
	}
}

// Release of a record that is not there (never claimed, already
// released, deleted) returns ErrLeaseLost.
func TestReleaseMissing(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if err := s.Release(ctx, hold(c.Scope, "never", "tok")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release of a key never claimed = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Release(ctx, c.Hold()); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second release = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if ok, err := s.Delete(ctx, c.Ref()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release after delete = %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	db := offlineDB(t)
	for name, opts := range map[string][]Option{
		"nil table":            {WithTable("")},
		"bad table":            {WithTable("a-b")},
		"negative sweep":       {WithSweepInterval(-time.Second)},
		"zero watch interval":  {WithWatchInterval(0)},
		"negative watch":       {WithWatchInterval(-time.Second)},
		"bad after nil option": {nil, WithTable("x y")},
	} {
		if _, err := New(db, opts...); !errors.Is(err, ErrBadOption) {
			t.Errorf("%s: New = %v, want ErrBadOption", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrBadOption) {
		t.Errorf("New(nil) = %v, want ErrBadOption", err)
	}
	// A good configuration on a server that is not there fails for that
	// reason alone, saying so.
	if _, err := New(db, WithSweepInterval(0)); err == nil || errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "max_allowed_packet") {
		t.Errorf("New on an unreachable server = %v, want an error that it could not ask the server", err)
	}
	live := newDB(t, 1)
	s, err := New(live, nil, WithLogger(nil), WithSweepInterval(0), nil)
	if err != nil {
		t.Fatalf("nil options: %v", err)
	}
	if s.Table() != DefaultTable || s.db != live {
		t.Errorf("table %q", s.Table())
	}
	s.Close()
	s.Close()
}

// The store needs no particular DSN or session setting: it works with
// client-side interpolation, CLIENT_FOUND_ROWS, an ANSI SQL mode, a
// non-strict SQL mode (values that do not fit are refused before they
// are sent), no backslash escapes and another character set.
func TestDriverAndSessionSettings(t *testing.T) {
	for name, configure := range map[string]func(*mysql.Config){
		"interpolateParams": func(c *mysql.Config) { c.InterpolateParams = true },
		"clientFoundRows":   func(c *mysql.Config) { c.ClientFoundRows = true },
		"ansi sql_mode": func(c *mysql.Config) {
			c.Params = map[string]string{"sql_mode": "'ANSI,NO_BACKSLASH_ESCAPES,HIGH_NOT_PRECEDENCE'"}
		},
		"empty sql_mode": func(c *mysql.Config) { c.Params = map[string]string{"sql_mode": "''"} },
		"latin1": func(c *mysql.Config) {
			if err := c.Apply(mysql.Charset("latin1", "")); err != nil {
				t.Fatal(err)
			}
		},
		"serializable":   func(c *mysql.Config) { c.Params = map[string]string{"tx_isolation": "'SERIALIZABLE'"} },
		"read committed": func(c *mysql.Config) { c.Params = map[string]string{"tx_isolation": "'READ-COMMITTED'"} },
		"safe updates":   func(c *mysql.Config) { c.Params = map[string]string{"sql_safe_updates": "1"} },
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, newDB(t, 2, configure))
			ctx := t.Context()
			c := store.Claim{Scope: "4:acme4:POST7:/o/{id}\x00'\\", Key: "k'\\", Fingerprint: "\x00f\xff'", Token: "t\x00\\", Now: t0, LeaseEnd: t0.Add(time.Minute)}
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if res, err := s.Claim(ctx, c); err != nil || res.Acquired {
				t.Fatalf("second claim: %+v %v", res, err)
			}
			if err := s.Extend(ctx, c.Hold(), t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := s.Extend(ctx, c.Hold(), t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatalf("extend to the same lease end: %v", err)
			}
			if err := s.Extend(ctx, hold(c.Scope, c.Key, "other"), t0, t0.Add(2*time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatalf("extend with another token: %v", err)
			}
			resp := result("\x01\xff'\\\x00", "\x00\x01\x02\\'x")
			if err := s.Complete(ctx, c.Hold(), completeAt(resp, t0, t0.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			res, err := s.Claim(ctx, c)
			if err != nil || res.Acquired || !reflect.DeepEqual(res.Existing.Result, resp) || res.Existing.Fingerprint != c.Fingerprint {
				t.Fatalf("replay = %+v %v", res.Existing, err)
			}
			if res, err := s.Claim(ctx, store.Claim{Scope: c.Scope, Key: c.Key, Fingerprint: "f", Token: "new", Now: t0.Add(time.Hour), LeaseEnd: t0.Add(2 * time.Hour)}); err != nil || !res.Acquired {
				t.Fatalf("takeover: %+v %v", res, err)
			}
			if err := s.Release(ctx, hold(c.Scope, c.Key, "new")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, claimAt("gone", "f", "t", t0, time.Minute)); err != nil {
				t.Fatal(err)
			}
			if n, err := s.DeleteExpired(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Fatal(n, err)
			}
			if ok, err := s.Delete(ctx, c.Ref()); err != nil || ok {
				t.Fatal(ok, err)
			}
			// Exactly-once mode, the clock and eviction, with a head and
			// a body of every byte value.
			all := make([]byte, 256)
			for i := range all {
				all[i] = byte(i)
			}
			c2 := store.Claim{Scope: c.Scope, Key: "tx'\\", Fingerprint: "f", Token: "t\x00'", Now: t0, LeaseEnd: t0.Add(time.Minute)}
			if res, err := s.Claim(ctx, c2); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			tx, err := s.ExactlyOnce().BeginTx(ctx, c2.Hold())
			if err != nil {
				t.Fatal(err)
			}
			resp = store.Result{Head: all, Body: all}
			if err := tx.Commit(ctx, completeAt(resp, t0, t0.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Claim(ctx, c2); err != nil || res.Acquired || !reflect.DeepEqual(res.Existing.Result, resp) {
				t.Fatalf("replay of the committed record = %+v %v", res.Existing, err)
			}
			if _, err := s.Now(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Evict(ctx, c2.Hold()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// New refuses a connection whose character_set_client and
// character_set_connection differ: the server would convert the bytes of
// the bodies the store sends as parameters.
func TestCharsetMismatch(t *testing.T) {
	db := newDB(t, 1, func(c *mysql.Config) { c.Params = map[string]string{"character_set_connection": "latin1"} })
	if s, err := New(db, WithTable(randomTable()), WithSweepInterval(0)); !errors.Is(err, errCharset) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("New = %v, want the character set error", err)
	}
}

// CreateSchema refuses a connection without autocommit: the store's
// writes would never commit.
func TestAutocommitOff(t *testing.T) {
	db := newDB(t, 1, func(c *mysql.Config) { c.Params = map[string]string{"autocommit": "0"} })
	s, err := New(db, WithTable(randomTable()), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateSchema(context.Background()); !errors.Is(err, errAutocommit) {
		t.Fatalf("CreateSchema = %v, want the autocommit error", err)
	}
}
