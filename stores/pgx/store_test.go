package pgxstore

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func claimAt(key, fp, token string, now time.Time, lease time.Duration) store.Claim {
	return store.Claim{Scope: idem.Scope("", "POST", "/orders"), Key: key, Fingerprint: fp, Token: token, Now: now, LeaseEnd: now.Add(lease)}
}

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

	// Opaque bytes, NUL and non-UTF-8 included, kept byte for byte.
	resp := store.Result{Head: []byte("\xf0head\x00\xff\r\n"), Body: []byte("{\"id\":1}\x00\xff")}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "wrong"), completion(resp, t0.Add(time.Second), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("complete with wrong token: %v", err)
	}
	// The caller may reuse the result's memory once Complete returns.
	reused := store.Result{Head: slices.Clone(resp.Head), Body: slices.Clone(resp.Body)}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok1"), completion(reused, t0.Add(time.Second), t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	clear(reused.Head)
	clear(reused.Body)
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok1"), completion(resp, t0.Add(time.Second), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
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
	if got.State != store.InProgress || got.Fingerprint != "fp9" || !reflect.DeepEqual(got.Result, store.Result{}) {
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

// A nil Body and an empty one come back as they went in (NULL and an
// empty bytea), and so does BodyOmitted.
func TestNilAndEmptyResultParts(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	head := result(204).Head
	for i, resp := range []store.Result{
		{Head: head},
		{Head: head, Body: []byte{}},
		{Head: []byte{0}, Body: []byte{0}},
		{Head: head, BodyOmitted: true},
		{Head: make([]byte, store.MaxHead), Body: make([]byte, 1<<20)},
	} {
		c := claimAt("k"+string(rune('a'+i)), "fp", "tok", t0, time.Minute)
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, hold(c.Scope, c.Key, "tok"), completion(resp, t0, t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Get(ctx, c.Ref(), t0)
		if err != nil || !reflect.DeepEqual(got.Result, resp) {
			t.Errorf("%d: got %d bytes of head, %d of body, omitted %v (nil body %v), %v; want %d, %d, %v (nil body %v)", i,
				len(got.Result.Head), len(got.Result.Body), got.Result.BodyOmitted, got.Result.Body == nil, err,
				len(resp.Head), len(resp.Body), resp.BodyOmitted, resp.Body == nil)
		}
	}
}

// A lease that ended without anyone taking the key over still belongs to
// its token: a late Extend or Complete lands. Once another claim took the
// key over, the old token's calls change nothing.
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
	// Not yet abandoned at the old lease end.
	if res, _ := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(time.Minute), time.Minute)); res.Acquired {
		t.Fatal("claim took an extended lease")
	}
	// At and after the lease end, nobody has taken the key over: a late
	// beat still lands.
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(3*time.Minute), t0.Add(4*time.Minute)); err != nil {
		t.Fatalf("late extend of a claim nobody took over: %v", err)
	}
	res, err := s.Claim(ctx, claimAt("k", "fp", "b", t0.Add(4*time.Minute), time.Minute))
	if err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v, %v", res, err)
	}
	if err := s.Extend(ctx, hold(c.Scope, c.Key, "a"), t0.Add(4*time.Minute), t0.Add(5*time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner extended after takeover: %v", err)
	}
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "a"), completion(result(200), t0.Add(4*time.Minute), t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner completed after takeover: %v", err)
	}
	// The new owner completes late, too.
	if err := s.Complete(ctx, hold(c.Scope, c.Key, "b"), completion(result(200), t0.Add(6*time.Minute), t0.Add(time.Hour))); err != nil {
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

func TestOpaqueScope(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i, scope := range []string{"", "\x00", "\x00\x01", "\xff\xfe", "é", "e\u0301"} {
		res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: "k", Fingerprint: "\x00fp\xff", Token: "\x00", Now: t0, LeaseEnd: t0.Add(time.Minute)})
		if err != nil || !res.Acquired {
			t.Fatalf("%d %q: %+v %v", i, scope, res, err)
		}
		rec, ok, err := s.Get(ctx, ref(scope, "k"), t0)
		if err != nil || !ok || rec.Fingerprint != "\x00fp\xff" {
			t.Fatalf("%d %q: %+v %v %v", i, scope, rec, ok, err)
		}
	}
	if err := s.Release(ctx, hold("\x00", "k", "\x00")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, ref("\x00\x01", "k"), t0); !ok {
		t.Fatal("released the wrong scope")
	}
}

func TestDeleteAndDeleteExpired(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	for i := range 2500 {
		c := claimAt("k"+time.Duration(i).String(), "fp", "tok", t0, time.Duration(i+1)*time.Millisecond)
		if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	ok, err := s.Delete(ctx, ref(idem.Scope("", "POST", "/orders"), "k0s"))
	if err != nil || !ok {
		t.Fatalf("delete = %v, %v", ok, err)
	}
	ok, err = s.Delete(ctx, ref(idem.Scope("", "POST", "/orders"), "k0s"))
	if err != nil || ok {
		t.Fatalf("second delete = %v, %v", ok, err)
	}
	// Leases end at t0+1ms ... t0+2500ms; k0s is gone. An in-progress
	// record stays a lease past its end, for a late completion: at
	// t0+2000ms, those whose lease ended by t0+1000ms go (2ms..1000ms,
	// 999 of them); at t0+5000ms, all.
	for _, step := range []struct {
		now        time.Duration
		gone, left int
	}{
		{2000 * time.Millisecond, 999, 1500},
		{5000 * time.Millisecond, 1500, 0},
	} {
		n, err := s.DeleteExpired(ctx, t0.Add(step.now))
		if err != nil || n != step.gone {
			t.Fatalf("DeleteExpired(t0+%v) = %d, %v; want %d", step.now, n, err, step.gone)
		}
		var left int
		if err := s.db.QueryRow(ctx, "SELECT count(*) FROM "+quoted(s.table)).Scan(&left); err != nil || left != step.left {
			t.Fatalf("left = %d, %v; want %d", left, err, step.left)
		}
	}
}

// A row that this package cannot have written (changed by hand, by a
// migration gone wrong) is refused with ErrCorruptRecord, not replayed.
// What the result's bytes say is the engine's to judge (see
// TestEngineCorruptRecord): the store refuses only a row that is not a
// record at all.
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
		{"completed without a head", 2, "headers = NULL"},
		{"completed with an empty head", 2, `headers = ''::bytea`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimAt(fmt.Sprint("k", i), "fp", "tok", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if tc.state == 2 {
				if err := s.Complete(ctx, c.Hold(), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.db.Exec(ctx, `UPDATE `+quoted(s.table)+` SET `+tc.set+` WHERE key = $1`, c.Key); err != nil {
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
	// Sound records of both states still read back: a completed row with a
	// head and no status, and rows completed before results were opaque
	// (a status, and header bytes or none), whose head is LegacyHead's.
	c := claimAt("fine", "fp", "tok", t0, time.Minute)
	if _, err := s.Claim(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status  any // NULL for a new row
		headers []byte
		head    []byte
	}{
		{nil, []byte("\x00"), []byte("\x00")},
		{200, nil, store.LegacyHead(200, nil)},
		{599, []byte{1, 0}, store.LegacyHead(599, []byte{1, 0})},
		{201, []byte{1, 1, 1, 'A', 1, 1, 'b'}, store.LegacyHead(201, []byte{1, 1, 1, 'A', 1, 1, 'b'})},
	} {
		if rec, ok, err := s.Get(ctx, c.Ref(), t0); err != nil || !ok || rec.State != store.InProgress {
			t.Fatal(rec, ok, err)
		}
		if _, err := s.db.Exec(ctx, `UPDATE `+quoted(s.table)+` SET state = 2, status = $2, headers = $3, lease_end = NULL WHERE key = $1`,
			c.Key, tc.status, tc.headers); err != nil {
			t.Fatal(err)
		}
		if rec, ok, err := s.Get(ctx, c.Ref(), t0); err != nil || !ok || rec.State != store.Completed || !reflect.DeepEqual(rec.Result.Head, tc.head) {
			t.Fatalf("status %v, headers %q: %+v %v %v; want the head %q", tc.status, tc.headers, rec, ok, err, tc.head)
		}
		if _, err := s.db.Exec(ctx, `UPDATE `+quoted(s.table)+` SET state = 1, status = NULL, headers = NULL, lease_end = expires_at WHERE key = $1`, c.Key); err != nil {
			t.Fatal(err)
		}
	}
}

// The engine answers a retry whose record is corrupt with 503, and does
// not run the handler again: a row that is not a record (the store's
// ErrCorruptRecord), and one whose result the engine cannot read, in the
// format of today or of a row completed before results were opaque (a
// status out of range, header bytes that do not parse).
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
	for i, tc := range []struct{ name, set string }{
		{"a status in a new row", "status = 700"},
		{"no head", "headers = NULL"},
		{"an unknown head format", `headers = '\xee'::bytea`},
		{"legacy status 0", `status = 0, headers = '\x0100'::bytea`},
		{"legacy status 199", `status = 199, headers = '\x0100'::bytea`},
		{"legacy status 600", `status = 600, headers = '\x0100'::bytea`},
		{"legacy status 700", `status = 700, headers = NULL`},
		{"legacy header bytes", `status = 201, headers = '\x02'::bytea`},
		{"legacy header bytes cut short", `status = 201, headers = '\x0101054163636570'::bytea`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprint("k", i)
			runs = 0
			if code := post(key); code != http.StatusCreated {
				t.Fatalf("first request: %d", code)
			}
			if _, err := s.db.Exec(t.Context(), `UPDATE `+quoted(s.table)+` SET `+tc.set+` WHERE key = $1`, key); err != nil {
				t.Fatal(err)
			}
			if code := post(key); code != http.StatusServiceUnavailable {
				t.Fatalf("retry with a corrupt record: %d, want 503", code)
			}
			if runs != 1 {
				t.Fatalf("handler ran %d times", runs)
			}
		})
	}
}
