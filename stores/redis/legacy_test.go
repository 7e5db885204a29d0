package redisstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// Records completed by earlier releases (an HTTP status, header bytes and
// a body where a result now is) keep reading: SET in that format straight
// into Redis, they come back through Get and Claim's Existing with the
// Head store.LegacyHead builds, and the engine replays them as before.
func TestLegacyRecord(t *testing.T) {
	client := testClient(t)
	s := newTestStore(t, client)
	ctx := t.Context()
	now := time.Now()
	base := store.Record{Fingerprint: "fp\x00\xff", CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}
	header := http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b"}}
	hdr := headerBytes(header)
	body := []byte(`{"id":7}`)

	// One record built byte by byte, as the earlier codec wrote it: status
	// 201 (uvarint c9 01), flags header|body (6), the header bytes' length
	// and the bytes (format 1, one name, "Location" with one value), the
	// body.
	oneHeader := "\x01\x01\x08Location\x01\x09/orders/7"
	byHand := string(recordPrefix(t, store.Record{State: store.Completed, Fingerprint: base.Fingerprint,
		CreatedAt: base.CreatedAt, ExpiresAt: base.ExpiresAt}, "tok")) +
		"\xc9\x01\x06\x16" + oneHeader + string(body) // 0x16: 22 header bytes

	for _, tc := range []struct {
		name  string
		token string // the claim's token; records completed before tokens were kept hold none
		value string
		want  store.Result
	}{
		{"by hand", "tok", byHand, store.Result{Head: store.LegacyHead(201, []byte(oneHeader)), Body: body}},
		{"headers and body", "tok", encodeLegacyRecord(t, base, "tok", legacyResponse{Status: 201, Header: hdr, Body: body}),
			store.Result{Head: store.LegacyHead(201, hdr), Body: body}},
		{"no token", "", encodeLegacyRecord(t, base, "", legacyResponse{Status: 200, Header: hdr, Body: body}),
			store.Result{Head: store.LegacyHead(200, hdr), Body: body}},
		{"nil header, nil body", "tok", encodeLegacyRecord(t, base, "tok", legacyResponse{Status: 204}),
			store.Result{Head: store.LegacyHead(204, nil)}},
		{"empty header, empty body", "tok", encodeLegacyRecord(t, base, "tok", legacyResponse{Status: 200, Header: []byte{1, 0}, Body: []byte{}}),
			store.Result{Head: store.LegacyHead(200, []byte{1, 0}), Body: []byte{}}},
		{"body omitted", "tok", encodeLegacyRecord(t, base, "tok", legacyResponse{Status: 200, Header: hdr, BodyOmitted: true}),
			store.Result{Head: store.LegacyHead(200, hdr), BodyOmitted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "legacy-" + tc.name
			k := s.Key("scope", key)
			if err := client.Set(ctx, k, tc.value, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			want := base
			want.State = store.Completed
			want.Result = tc.want
			rec, ok, err := s.Get(ctx, refOf("scope", key), now)
			if err != nil || !ok {
				t.Fatalf("Get: %v, %v", ok, err)
			}
			checkRecord(t, rec, want)
			for _, script := range []bool{false, true} {
				s.scriptClaims = script
				res, err := s.Claim(ctx, store.Claim{Scope: "scope", Key: key, Fingerprint: "other", Token: "t2", Now: now, LeaseEnd: now.Add(time.Minute)})
				if err != nil || res.Acquired || res.Existing == nil {
					t.Fatalf("Claim (script %v): %+v, %v", script, res, err)
				}
				checkRecord(t, *res.Existing, want)
			}
			s.scriptClaims = false
			if v, err := client.Get(ctx, k).Result(); err != nil || v != tc.value {
				t.Fatalf("the record changed: %q, %v", v, err)
			}
			// The scripts read only the fixed header, which did not change:
			// a completed legacy record is no claim, and Evict deletes it
			// while it holds the token (never when it holds none).
			for name, err := range map[string]error{
				"Complete": s.Complete(ctx, holdOf("scope", key, tc.token), completion(store.Result{Head: []byte{1}}, now, now.Add(time.Hour))),
				"Release":  s.Release(ctx, holdOf("scope", key, tc.token)),
				"Extend":   s.Extend(ctx, holdOf("scope", key, tc.token), now, now.Add(time.Hour)),
				"Evict":    s.Evict(ctx, holdOf("scope", key, "another")),
			} {
				if !errors.Is(err, store.ErrLeaseLost) {
					t.Errorf("%s = %v, want ErrLeaseLost", name, err)
				}
			}
			err = s.Evict(ctx, holdOf("scope", key, tc.token))
			if tc.token == "" {
				if !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("Evict of a record without a token = %v, want ErrLeaseLost", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evict with the record's token: %v", err)
			}
			if n, err := client.Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Fatalf("the record is still there after Evict: %d, %v", n, err)
			}
		})
	}
}

// The engine replays a legacy record: its status, its headers (every
// value, in order) and its body, on either claim path, without running
// the handler again.
func TestLegacyRecordEngine(t *testing.T) {
	client := testClient(t)
	s := newTestStore(t, client)
	ctx := t.Context()
	e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "fresh")
	}))
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	header := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/orders/7"},
		"X-Multi":      {"a", "", "b"},
	}
	for _, tc := range []struct {
		name   string
		resp   legacyResponse
		status int
		header http.Header
		body   string
	}{
		{"headers and body", legacyResponse{Status: 202, Header: headerBytes(header), Body: []byte(`{"id":7}`)}, 202, header, `{"id":7}`},
		{"no headers, no body", legacyResponse{Status: 204}, 204, nil, ""},
		{"client error", legacyResponse{Status: 422, Header: headerBytes(http.Header{"Content-Type": {"application/problem+json"}}), Body: []byte(`{"title":"no"}`)},
			422, http.Header{"Content-Type": {"application/problem+json"}}, `{"title":"no"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "legacy-" + strconv.Itoa(runs)
			if w := post(key); w.Code != http.StatusCreated || w.Body.String() != "fresh" {
				t.Fatalf("first request: %d %q", w.Code, w.Body)
			}
			// Turn the engine's record into the one an earlier release
			// would have written, keeping its fingerprint, times and token.
			k, v := completedRecord(ctx, t, s, client.Keys(ctx, s.prefix+"{*").Val())
			rec, err := decodeRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(v[offTokLen:offToken])
			legacy := encodeLegacyRecord(t, rec, v[offToken:offToken+n], tc.resp)
			if err := client.Set(ctx, k, legacy, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.PExpireAt(ctx, k, rec.ExpiresAt).Err(); err != nil {
				t.Fatal(err)
			}
			before := runs
			for _, script := range []bool{false, true} {
				s.scriptClaims = script
				w := post(key)
				if w.Code != tc.status || w.Body.String() != tc.body {
					t.Errorf("replay (script %v): %d %q, want %d %q", script, w.Code, w.Body, tc.status, tc.body)
				}
				for name, vals := range tc.header {
					if got := w.Header().Values(name); !slices.Equal(got, vals) {
						t.Errorf("replay (script %v): %s = %q, want %q", script, name, got, vals)
					}
				}
			}
			s.scriptClaims = false
			if runs != before {
				t.Fatalf("the handler ran %d more times on replays", runs-before)
			}
			if err := client.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// completedRecord returns the one completed record among keys.
func completedRecord(ctx context.Context, t *testing.T, s *Store, keys []string) (key, value string) {
	t.Helper()
	for _, k := range keys {
		v, err := s.client.Get(ctx, k).Result()
		if err != nil {
			continue // a waiter mark that expired, or not a record
		}
		if rec, err := decodeRecord(v); err == nil && rec.State == store.Completed {
			if key != "" {
				t.Fatalf("two completed records: %s and %s", key, k)
			}
			key, value = k, v
		}
	}
	if key == "" {
		t.Fatalf("no completed record among %q", keys)
	}
	return key, value
}
