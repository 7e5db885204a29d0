package idem

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/core/store"
)

func testKey(id string, b byte) EncryptionKey {
	return EncryptionKey{ID: id, Secret: bytes.Repeat([]byte{b}, 32)}
}

// raw returns the record s holds for (scope, key), as the store keeps it
// (sealed, when it is), its result decoded.
func (s *testStore) raw(scope, key string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[[2]string{scope, key}]
	if !ok {
		return nil
	}
	rec, err := fromStore(&r.Record)
	if err != nil {
		panic(err)
	}
	return rec
}

// put stores rec under (scope, key), as a tool with access to the store
// could.
func (s *testStore) put(scope, key string, rec record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := store.Record{Fingerprint: rec.Fingerprint, State: rec.State, CreatedAt: rec.CreatedAt, LeaseEnd: rec.LeaseEnd, ExpiresAt: rec.ExpiresAt}
	if rec.Response != nil {
		r.Result = encodeResult(rec.Response)
	}
	s.recs[[2]string{scope, key}] = &testRec{Record: r}
}

const secretBody = `{"card":"4242 4242 4242 4242","name":"Ada Lovelace"}`

func paymentHandler(runs *int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*runs++
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Customer", "Ada Lovelace")
		w.WriteHeader(201)
		w.Write([]byte(secretBody))
	})
}

func TestEncryptionSealsAndReplays(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s, WithEncryption(testKey("k1", 1)))
	runs := 0
	h := e.Middleware()(paymentHandler(&runs))
	if w := post(h, "/pay", "k", `{"amount":10}`); w.Code != 201 || w.Body.String() != secretBody {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	rec := s.raw(Scope("", "POST", ""), "k")
	if rec == nil {
		t.Fatal("nothing stored")
	}
	// The store holds neither the body, nor the headers, nor a fingerprint
	// anyone can recompute from a guessed request.
	if bytes.Contains(rec.Response.Body, []byte("4242")) || bytes.Contains(rec.Response.Body, []byte("Lovelace")) {
		t.Error("the stored body holds the plaintext")
	}
	if len(rec.Response.Header) != 1 || rec.Response.Header.Get(HeaderSealed) != "k1" {
		t.Errorf("stored headers %v, want only %s: k1", rec.Response.Header, HeaderSealed)
	}
	if rec.Response.Status != 201 {
		t.Errorf("stored status %d", rec.Response.Status)
	}
	r, _ := http.NewRequest("POST", "/pay", strings.NewReader(`{"amount":10}`))
	if raw := fingerprintRequest(r, []byte(`{"amount":10}`)); strings.Contains(rec.Fingerprint, raw) || !strings.HasPrefix(rec.Fingerprint, "k1.") {
		t.Errorf("stored fingerprint %q: want a keyed one", rec.Fingerprint)
	}

	w := post(h, "/pay", "k", `{"amount":10}`)
	if w.Code != 201 || w.Body.String() != secretBody || w.Header().Get("X-Customer") != "Ada Lovelace" || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w.Header().Get(HeaderSealed) != "" {
		t.Error("the seal marker reached the client")
	}
	if w := post(h, "/pay", "k", `{"amount":11}`); w.Code != 422 {
		t.Errorf("another body: %d, want 422", w.Code)
	}
	if runs != 1 {
		t.Errorf("ran %d times", runs)
	}
	if got := ev.outcomes(); got[1] != OutcomeReplayed || got[2] != OutcomeFingerprintMismatch {
		t.Errorf("outcomes %v", got)
	}
}

func TestEncryptionRotationAndFailures(t *testing.T) {
	k1, k2, k3 := testKey("k1", 1), testKey("k2", 2), testKey("k3", 3)
	s := newTestStore()
	old, _ := newEngine(t, s, WithEncryption(k1))
	runs := 0
	post(old.Middleware()(paymentHandler(&runs)), "/pay", "k", "a")
	scope := Scope("", "POST", "")

	t.Run("a new writer reads the old key's records", func(t *testing.T) {
		e, _ := newEngine(t, s, WithEncryption(k1, k2))
		h := e.Middleware()(paymentHandler(&runs))
		if w := post(h, "/pay", "k", "a"); w.Code != 201 || w.Body.String() != secretBody || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay after rotation: %d %q", w.Code, w.Body)
		}
		if w := post(h, "/pay", "k", "b"); w.Code != 422 {
			t.Errorf("another body after rotation: %d, want 422", w.Code)
		}
		post(h, "/pay", "k2", "a")
		if got := s.raw(scope, "k2").Response.Header.Get(HeaderSealed); got != "k2" {
			t.Errorf("a new record is sealed with %q, want the last key", got)
		}
	})
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"the key left the ring", []Option{WithEncryption(k3)}},
		{"encryption turned off", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ev := newEngine(t, s, tc.opts...)
			before := runs
			w := post(e.Middleware()(paymentHandler(&runs)), "/pay", "k", "a")
			if w.Code != 500 || !strings.Contains(w.Body.String(), "record-unreadable") || runs != before {
				t.Errorf("%d %q, runs %d→%d: want 500 record-unreadable and no run", w.Code, w.Body, before, runs)
			}
			if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeUndecryptable || !errors.Is(ev.evs[0].Err, ErrUndecryptable) {
				t.Errorf("outcomes %v, err %v", got, ev.evs[0].Err)
			}
		})
	}
	t.Run("a ciphertext moved to another key", func(t *testing.T) {
		e, _ := newEngine(t, s, WithEncryption(k1))
		h := e.Middleware()(paymentHandler(&runs))
		post(h, "/pay", "victim", "a")
		moved := *s.raw(scope, "k")
		moved.Fingerprint = s.raw(scope, "victim").Fingerprint // the fingerprint matches: only the seal can tell
		s.put(scope, "victim", moved)
		before := runs
		if w := post(h, "/pay", "victim", "a"); w.Code != 500 || runs != before {
			t.Errorf("moved ciphertext: %d %q, want 500 and no run", w.Code, w.Body)
		}
	})
	t.Run("an altered ciphertext", func(t *testing.T) {
		e, _ := newEngine(t, s, WithEncryption(k1))
		rec := *s.raw(scope, "k")
		resp := *rec.Response
		resp.Body = bytes.Clone(resp.Body)
		resp.Body[len(resp.Body)-1] ^= 1
		rec.Response = &resp
		s.put(scope, "k", rec)
		_, _, err := e.Do(t.Context(), Op{Kind: "POST", Name: "", Key: "k", Fingerprint: Fingerprint("POST", "/pay", []byte("a"))}, nil)
		if !errors.Is(err, ErrUndecryptable) {
			t.Fatalf("Do on an altered record: %v, want ErrUndecryptable", err)
		}
		if p, _ := e.Policy().Problem(err); p.Status != 500 || !strings.HasSuffix(p.Type, "record-unreadable") {
			t.Errorf("Problem %+v", p)
		}
		w := post(e.Middleware()(paymentHandler(&runs)), "/pay", "k", "a")
		if w.Code != 500 {
			t.Errorf("altered: %d", w.Code)
		}
	})
}

func TestEncryptionDo(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s, WithEncryption(testKey("k1", 1)))
	c := &counter{}
	o := op("k", "a")
	for i := range 2 {
		v, replayed, err := e.Do(t.Context(), o, c.fn)
		if err != nil || string(v) != "run 1" || replayed != (i == 1) {
			t.Fatalf("call %d: %q %v %v", i, v, replayed, err)
		}
	}
	if rec := s.raw(Scope("", "test", "charge"), "k"); bytes.Contains(rec.Response.Body, []byte("run 1")) {
		t.Error("Do's value is stored in the clear")
	}
	// A final error is sealed too.
	final := func(context.Context) ([]byte, error) { return nil, Final(errors.New("card declined for Ada")) }
	e.Do(t.Context(), op("f", "a"), final)
	if rec := s.raw(Scope("", "test", "charge"), "f"); bytes.Contains(rec.Response.Body, []byte("Ada")) {
		t.Error("a final error is stored in the clear")
	}
	if _, _, err := e.Do(t.Context(), op("f", "a"), final); err == nil || !strings.Contains(err.Error(), "card declined for Ada") {
		t.Errorf("final replay: %v", err)
	}
}

// TestEncryptionBindsDoKind: the kind of a sealed Do result is part of
// what the seal authenticates: a value whose stored kind is flipped to a
// final error (or back) does not open, rather than replay its plaintext
// as the other.
func TestEncryptionBindsDoKind(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s, WithEncryption(testKey("k1", 1)))
	c := &counter{}
	if _, _, err := e.Do(t.Context(), op("k", "a"), c.fn); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.recs {
		r.Result.Head[0] = headFinal // was headValue
	}
	v, _, err := e.Do(t.Context(), op("k", "a"), c.fn)
	if !errors.Is(err, ErrUndecryptable) || v != nil || c.runs.Load() != 1 {
		t.Errorf("a sealed value relabelled a final error: %q, %v after %d runs; want ErrUndecryptable", v, err, c.runs.Load())
	}
}

// TestHandlerSealedHeaderIsNotStored: a handler's own Idem-Sealed response
// header is the engine's marker, not the handler's: it is not stored, so
// replays are not taken for sealed records.
func TestHandlerSealedHeaderIsNotStored(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderSealed, "mine")
		w.WriteHeader(201)
		w.Write([]byte("ok"))
	}))
	post(h, "/", "k", "")
	if w := post(h, "/", "k", ""); w.Code != 201 || w.Body.String() != "ok" || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after a handler set %s: %d %q", HeaderSealed, w.Code, w.Body)
	}
}

func TestEncryptionKeepsPlainRecordsAndOmittedBodies(t *testing.T) {
	s := newTestStore()
	plain, _ := newEngine(t, s)
	runs := 0
	post(plain.Middleware()(paymentHandler(&runs)), "/pay", "old", "a")
	e, _ := newEngine(t, s, WithEncryption(testKey("k1", 1)))
	h := e.Middleware(WithMaxResponseBody(8))(paymentHandler(&runs))
	// A record stored before encryption was on keeps replaying.
	if w := post(h, "/pay", "old", "a"); w.Code != 201 || w.Body.String() != secretBody || runs != 1 {
		t.Errorf("a plain record under a ring: %d %q, runs %d", w.Code, w.Body, runs)
	}
	if w := post(h, "/pay", "old", "b"); w.Code != 422 {
		t.Errorf("a plain record, another body: %d", w.Code)
	}
	// A body past the cap is omitted; its headers are still sealed.
	post(h, "/pay", "big", "a")
	rec := s.raw(Scope("", "POST", ""), "big")
	if rec.Response.BodyOmitted || rec.Response.Header.Get("X-Customer") != "" {
		t.Errorf("stored %+v", rec.Response)
	}
	w := post(h, "/pay", "big", "a")
	if w.Code != 201 || w.Body.Len() != 0 || w.Header().Get(HeaderBodyOmitted) != "true" || w.Header().Get("X-Customer") != "Ada Lovelace" {
		t.Errorf("omitted replay: %d %q %v", w.Code, w.Body, w.Header())
	}
	// A store that dropped a sealed body for want of room replays the
	// status alone.
	rec.Response = &Response{Status: 201, Header: rec.Response.Header, BodyOmitted: true}
	s.put(Scope("", "POST", ""), "big", *rec)
	if w := post(h, "/pay", "big", "a"); w.Code != 201 || w.Header().Get(HeaderBodyOmitted) != "true" || w.Header().Get("X-Customer") != "" {
		t.Errorf("dropped sealed body: %d %v", w.Code, w.Header())
	}
}

func TestEncryptionOptions(t *testing.T) {
	good := testKey("k1", 1)
	for _, tc := range []struct {
		name string
		keys []EncryptionKey
	}{
		{"no keys", nil},
		{"short secret", []EncryptionKey{{ID: "k", Secret: make([]byte, 16)}}},
		{"empty ID", []EncryptionKey{{Secret: good.Secret}}},
		{"bad ID", []EncryptionKey{{ID: "k 1", Secret: good.Secret}}},
		{"long ID", []EncryptionKey{{ID: strings.Repeat("k", 33), Secret: good.Secret}}},
		{"twice", []EncryptionKey{good, good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(newTestStore(), WithEncryption(tc.keys...)); !errors.Is(err, ErrBadOption) {
				t.Errorf("New: %v, want ErrBadOption", err)
			}
		})
	}
}

func TestParseEncryptionKeys(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	for _, tc := range []struct {
		name, file string
		ids        string // the IDs, or "" for an error
		err        string
	}{
		{"two keys", "# ring\nold:" + b64 + "\n\nnew: " + b64 + "\n", "old,new", ""},
		{"no colon", "k1" + b64, "", "line 1: want ID:BASE64"},
		{"bad base64", "k1:!!!", "", "line 1: key \"k1\": the secret is not standard base64"},
		{"short", "k1:" + base64.StdEncoding.EncodeToString([]byte("short")), "", "the secret is 5 bytes, want 32"},
		{"duplicate", "k1:" + b64 + "\nk1:" + b64, "", "given twice"},
		{"empty", "# nothing\n", "", "no keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ParseEncryptionKeys(strings.NewReader(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.ID)
			}
			if err != nil || strings.Join(ids, ",") != tc.ids {
				t.Errorf("keys %v, %v", ids, err)
			}
		})
	}
}

func FuzzParseEncryptionKeys(f *testing.F) {
	f.Add("k1:" + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	f.Add("a:b\n#c\n\nd:")
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseEncryptionKeys(strings.NewReader(s))
		if err == nil {
			if _, err := newKeyRing(keys); err != nil {
				t.Fatalf("parsed a ring New refuses: %v", err)
			}
		}
	})
}

// FuzzOpen feeds open stored bodies: it must never panic, and anything
// it opens is what seal sealed (the seed), never a forged response.
func FuzzOpen(f *testing.F) {
	e, err := New(newTestStore(), WithEncryption(testKey("k1", 1)))
	if err != nil {
		f.Fatal(err)
	}
	sealed := e.seal("s", "k", Response{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("body")})
	f.Add(sealed.Body, 200)
	f.Add([]byte{}, 201)
	f.Fuzz(func(t *testing.T, body []byte, status int) {
		resp, err := e.open("s", "k", &Response{Status: status, Header: http.Header{HeaderSealed: {"k1"}}, Body: body})
		if err == nil && (status != 200 || string(resp.Body) != "body" || resp.Header.Get("A") != "b") {
			t.Fatalf("opened a forged record: %+v", resp)
		}
		if err != nil && !errors.Is(err, ErrUndecryptable) {
			t.Fatalf("error %v does not wrap ErrUndecryptable", err)
		}
	})
}

// TestEncryptionLegacyDoRecords: Do results sealed before results had
// kinds (an HTTP 200 for a value, 422 for a final error, sealed with the
// status alone in the associated data) still open and replay. The sealed
// bytes are what the version before (ad01961) wrote for key "k".
func TestEncryptionLegacyDoRecords(t *testing.T) {
	for _, tc := range []struct {
		status       int
		sealed       string
		value, final string
	}{
		{legacyValue, "34156879d39938e90fad5d7d34f0af61325455ce20d4fd3d3d483aa35c2b2bb4f3f623effc7742f984", "receipt 7", ""},
		{legacyFinal, "b0f21ae0d855ecb0bc3150ce39e9b31d0c41aa6b0863aa6c3b8d8bb19c06a3423889c926d1b9e674fcbcefac3a", "", "card declined"},
	} {
		s := newTestStore()
		e, _ := newEngine(t, s, WithEncryption(testKey("k1", 1)))
		c := &counter{}
		if _, _, err := e.Do(t.Context(), op("k", "a"), c.fn); err != nil {
			t.Fatal(err)
		}
		body, err := hex.DecodeString(tc.sealed)
		if err != nil {
			t.Fatal(err)
		}
		legacy := Response{Status: tc.status, Header: http.Header{HeaderSealed: {"k1"}}, Body: body}
		s.mu.Lock()
		s.recs[[2]string{Scope("", "test", "charge"), "k"}].Result = store.Result{Head: store.LegacyHead(tc.status, AppendHeader(nil, legacy.Header)), Body: body}
		s.mu.Unlock()
		v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn)
		switch {
		case tc.final != "" && (err == nil || err.Error() != tc.final || !replayed):
			t.Errorf("legacy final error: %q %v %v", v, replayed, err)
		case tc.final == "" && (err != nil || string(v) != tc.value || !replayed):
			t.Errorf("legacy value: %q %v %v", v, replayed, err)
		}
		if n := c.runs.Load(); n != 1 {
			t.Errorf("status %d: ran %d times", tc.status, n)
		}
	}
}
