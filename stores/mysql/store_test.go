package mysqlstore

import (
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
	if ex.State != idem.StateInProgress || ex.Fingerprint != "fp1" || !ex.CreatedAt.Equal(t0) ||
		!ex.LeaseEnd.Equal(t0.Add(time.Minute)) || !ex.ExpiresAt.Equal(t0.Add(time.Minute)) || ex.Response != nil {
		t.Fatalf("existing = %+v", ex)
	}

	resp := idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Odd": {"a\x00b\xff", ""}}, Body: []byte(`{"id":1}`)}
	if err := s.Complete(ctx, c.Scope, c.Key, "wrong", resp, t0.Add(time.Second), t0.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("complete with wrong token: %v", err)
	}
	if err := s.Complete(ctx, c.Scope, c.Key, "tok1", resp, t0.Add(time.Second), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Scope, c.Key, "tok1", resp, t0.Add(time.Second), t0.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second complete: %v", err)
	}
	if err := s.Release(ctx, c.Scope, c.Key, "tok1"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("release of completed: %v", err)
	}
	res, err = s.Claim(ctx, claimAt("k1", "fp1", "tok3", t0.Add(2*time.Minute), time.Minute))
	if err != nil || res.Acquired {
		t.Fatalf("replay claim = %+v, %v", res, err)
	}
	ex = res.Existing
	if ex.State != idem.StateCompleted || !ex.LeaseEnd.IsZero() || !ex.ExpiresAt.Equal(t0.Add(time.Hour)) || !reflect.DeepEqual(*ex.Response, resp) {
		t.Fatalf("replay existing = %+v %+v", ex, ex.Response)
	}
	got, ok, err := s.Get(ctx, c.Scope, c.Key, t0.Add(time.Hour-time.Microsecond))
	if err != nil || !ok || !reflect.DeepEqual(*got.Response, resp) {
		t.Fatalf("get = %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.Get(ctx, c.Scope, c.Key, t0.Add(time.Hour)); ok {
		t.Fatal("get at expiry found the record")
	}
	// Expired: a new claim takes it over.
	res, err = s.Claim(ctx, claimAt("k1", "fp9", "tok9", t0.Add(time.Hour), time.Minute))
	if err != nil || !res.Acquired {
		t.Fatalf("claim after expiry = %+v, %v", res, err)
	}
	got, _, _ = s.Get(ctx, c.Scope, c.Key, t0.Add(time.Hour))
	if got.State != idem.StateInProgress || got.Fingerprint != "fp9" || got.Response != nil || !got.CreatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after takeover = %+v", got)
	}
	if err := s.Release(ctx, c.Scope, c.Key, "tok1"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("release with old token: %v", err)
	}
	if err := s.Release(ctx, c.Scope, c.Key, "tok9"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, c.Scope, c.Key, t0.Add(time.Hour)); ok {
		t.Fatal("record survived release")
	}
}

func TestNilAndEmptyResponseParts(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i, resp := range []idem.Response{
		{Status: 204},
		{Status: 200, Header: http.Header{}, Body: []byte{}},
		{Status: 200, Header: http.Header{"A": {"1", "2"}, "Empty": {}}, BodyOmitted: true},
	} {
		c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Minute)
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c.Scope, c.Key, "tok", resp, t0, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Get(ctx, c.Scope, c.Key, t0)
		if err != nil || !reflect.DeepEqual(*got.Response, resp) {
			t.Errorf("%d: got %#v, %v; want %#v", i, got.Response, err, resp)
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
	if err := s.Extend(ctx, c.Scope, c.Key, "b", t0, t0.Add(2*time.Minute)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("extend with wrong token: %v", err)
	}
	if err := s.Extend(ctx, c.Scope, c.Key, "a", t0.Add(30*time.Second), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Extending to the lease end it already has changes no column; it
	// still succeeds.
	if err := s.Extend(ctx, c.Scope, c.Key, "a", t0.Add(40*time.Second), t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("extend to the same lease end: %v", err)
	}
	// Not yet abandoned at the old lease end.
	if res, _ := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(time.Minute), time.Minute)); res.Acquired {
		t.Fatal("claim took an extended lease")
	}
	// At and past the lease end, nobody having taken the key over, the
	// claim is still the token's: a late Extend lands.
	if err := s.Extend(ctx, c.Scope, c.Key, "a", t0.Add(3*time.Minute), t0.Add(4*time.Minute)); err != nil {
		t.Fatalf("extend after the lease end: %v", err)
	}
	res, err := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(4*time.Minute), time.Minute))
	if err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v, %v", res, err)
	}
	if err := s.Complete(ctx, c.Scope, c.Key, "a", idem.Response{Status: 200}, t0.Add(4*time.Minute), t0.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old owner completed after takeover: %v", err)
	}
	if err := s.Extend(ctx, c.Scope, c.Key, "a", t0.Add(4*time.Minute), t0.Add(5*time.Minute)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old owner extended after takeover: %v", err)
	}
	// The new owner completes past its own lease end: late, but it lands.
	if err := s.Complete(ctx, c.Scope, c.Key, "b", idem.Response{Status: 200}, t0.Add(6*time.Minute), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

func TestSubMicrosecondTimes(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	now := t0.Add(500 * time.Nanosecond)
	c := idem.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "t", Now: now, LeaseEnd: now.Add(time.Second)}
	if res, _ := s.Claim(ctx, c); !res.Acquired {
		t.Fatal("not acquired")
	}
	// One nanosecond before the lease end the claim is still held ...
	if res, _ := s.Claim(ctx, idem.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "u", Now: c.LeaseEnd.Add(-time.Nanosecond), LeaseEnd: c.LeaseEnd.Add(time.Minute)}); res.Acquired {
		t.Fatal("claim before lease end acquired")
	}
	// ... and a microsecond after it, it is gone.
	if res, _ := s.Claim(ctx, idem.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "u", Now: c.LeaseEnd.Add(time.Microsecond), LeaseEnd: c.LeaseEnd.Add(time.Minute)}); !res.Acquired {
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
		res, err := s.Claim(ctx, idem.Claim{Scope: scope, Key: "k", Fingerprint: fmt.Sprint("\x00fp\xff", i), Token: "\x00", Now: t0, LeaseEnd: t0.Add(time.Minute)})
		if err != nil || !res.Acquired {
			t.Fatalf("%d %.20q: %+v %v", i, scope, res, err)
		}
	}
	for i, scope := range scopes {
		rec, ok, err := s.Get(ctx, scope, "k", t0)
		if err != nil || !ok || rec.Fingerprint != fmt.Sprint("\x00fp\xff", i) {
			t.Fatalf("%d %.20q: %+v %v %v", i, scope, rec, ok, err)
		}
	}
	if err := s.Release(ctx, long+"a", "k", "\x00"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, long+"b", "k", t0); !ok {
		t.Fatal("released the wrong scope")
	}
	if _, ok, _ := s.Get(ctx, long+"a", "k", t0); ok {
		t.Fatal("release of a long scope did nothing")
	}
}

// Values that do not fit a column are refused before anything is sent,
// whatever the server's SQL mode would do with them.
func TestLimits(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for _, c := range []idem.Claim{
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
	for _, status := range []int{0, 199, 600} {
		if err := s.Complete(ctx, c.Scope, c.Key, c.Token, idem.Response{Status: status}, t0, t0.Add(time.Hour)); err == nil || errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("complete with status %d: %v", status, err)
		}
	}
	if err := s.Complete(ctx, c.Scope, c.Key, c.Token, idem.Response{Status: 200}, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if rec, ok, err := s.Get(ctx, c.Scope, c.Key, t0); err != nil || !ok || rec.Fingerprint != c.Fingerprint {
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
	ok, err := s.Delete(ctx, scope, "k0")
	if err != nil || !ok {
		t.Fatalf("delete = %v, %v", ok, err)
	}
	ok, err = s.Delete(ctx, scope, "k0")
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
		{"completed without status", 2, "status = NULL"},
		{"completed status 0", 2, "status = 0"},
		{"completed status 199", 2, "status = 199"},
		{"completed status 600", 2, "status = 600"},
		{"completed status 700", 2, "status = 700"},
		{"bad headers", 2, "headers = X'02'"},
		{"empty headers", 2, "headers = X''"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if tc.state == 2 {
				if err := s.Complete(ctx, c.Scope, c.Key, "tok", idem.Response{Status: 200, Header: http.Header{"A": {"b"}}}, t0, t0.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.db.ExecContext(ctx, "UPDATE "+quoteIdent(s.table)+" SET "+tc.set+" WHERE `key` = ?", c.Key); err != nil {
				t.Fatal(err)
			}
			_, err := s.Claim(ctx, claimAt(c.Key, "fp", "other", t0.Add(time.Second), time.Minute))
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Errorf("claim = %v, want ErrCorruptRecord", err)
			}
			if _, _, err := s.Get(ctx, c.Scope, c.Key, t0.Add(time.Second)); !errors.Is(err, idem.ErrCorruptRecord) {
				t.Errorf("get = %v, want ErrCorruptRecord", err)
			}
			t.Log(err)
		})
	}
}

// The engine answers a retry whose record is corrupt with 503, and does
// not run the handler again.
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
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post(); code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	if _, err := s.db.ExecContext(t.Context(), "UPDATE "+quoteIdent(s.table)+" SET status = 700"); err != nil {
		t.Fatal(err)
	}
	if code := post(); code != http.StatusServiceUnavailable {
		t.Fatalf("retry with a corrupt record: %d, want 503", code)
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times", runs)
	}
}

// Release of a record that is not there (never claimed, already
// released, deleted) returns ErrLeaseLost.
func TestReleaseMissing(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if err := s.Release(ctx, c.Scope, "never", "tok"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("release of a key never claimed = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Release(ctx, c.Scope, c.Key, c.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c.Scope, c.Key, c.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second release = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if ok, err := s.Delete(ctx, c.Scope, c.Key); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.Release(ctx, c.Scope, c.Key, c.Token); !errors.Is(err, idem.ErrLeaseLost) {
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
			c := idem.Claim{Scope: "4:acme4:POST7:/o/{id}\x00'\\", Key: "k'\\", Fingerprint: "\x00f\xff'", Token: "t\x00\\", Now: t0, LeaseEnd: t0.Add(time.Minute)}
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if res, err := s.Claim(ctx, c); err != nil || res.Acquired {
				t.Fatalf("second claim: %+v %v", res, err)
			}
			if err := s.Extend(ctx, c.Scope, c.Key, c.Token, t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := s.Extend(ctx, c.Scope, c.Key, c.Token, t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatalf("extend to the same lease end: %v", err)
			}
			if err := s.Extend(ctx, c.Scope, c.Key, "other", t0, t0.Add(2*time.Minute)); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("extend with another token: %v", err)
			}
			resp := idem.Response{Status: 201, Header: http.Header{"A": {"1", "\xff'\\"}}, Body: []byte{0, 1, 2, '\\', '\'', 'x'}}
			if err := s.Complete(ctx, c.Scope, c.Key, c.Token, resp, t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			res, err := s.Claim(ctx, c)
			if err != nil || res.Acquired || !reflect.DeepEqual(*res.Existing.Response, resp) || res.Existing.Fingerprint != c.Fingerprint {
				t.Fatalf("replay = %+v %v", res.Existing, err)
			}
			if res, err := s.Claim(ctx, idem.Claim{Scope: c.Scope, Key: c.Key, Fingerprint: "f", Token: "new", Now: t0.Add(time.Hour), LeaseEnd: t0.Add(2 * time.Hour)}); err != nil || !res.Acquired {
				t.Fatalf("takeover: %+v %v", res, err)
			}
			if err := s.Release(ctx, c.Scope, c.Key, "new"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, claimAt("gone", "f", "t", t0, time.Minute)); err != nil {
				t.Fatal(err)
			}
			if n, err := s.DeleteExpired(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Fatal(n, err)
			}
			if ok, err := s.Delete(ctx, c.Scope, c.Key); err != nil || ok {
				t.Fatal(ok, err)
			}
			// Exactly-once mode, the clock and eviction, with a body of
			// every byte value.
			all := make([]byte, 256)
			for i := range all {
				all[i] = byte(i)
			}
			c2 := idem.Claim{Scope: c.Scope, Key: "tx'\\", Fingerprint: "f", Token: "t\x00'", Now: t0, LeaseEnd: t0.Add(time.Minute)}
			if res, err := s.Claim(ctx, c2); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			tx, err := s.ExactlyOnce().BeginTx(ctx, c2.Scope, c2.Key, c2.Token)
			if err != nil {
				t.Fatal(err)
			}
			resp = idem.Response{Status: 201, Header: http.Header{"B": {string(all)}}, Body: all}
			if err := tx.Commit(ctx, resp, t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Claim(ctx, c2); err != nil || res.Acquired || !reflect.DeepEqual(*res.Existing.Response, resp) {
				t.Fatalf("replay of the committed record = %+v %v", res.Existing, err)
			}
			if _, err := s.Now(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Evict(ctx, c2.Scope, c2.Key, c2.Token); err != nil {
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
