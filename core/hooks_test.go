package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var cardNumber = regexp.MustCompile(`"card":"[^"]*"`)

func redactCard(_ context.Context, r Response) Response {
	r.Header.Del("X-Customer")
	r.Body = cardNumber.ReplaceAll(r.Body, []byte(`"card":"****"`))
	r.Status = 200 // ignored: the status stays the one decided
	return r
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		{"sealed", []Option{WithEncryption(testKey("k1", 1))}},
		{"cached", []Option{WithReplayCache(1<<20, time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			e, _ := newEngine(t, s, append([]Option{WithRedact(redactCard)}, tc.opts...)...)
			runs := 0
			h := e.Middleware()(paymentHandler(&runs))
			first := post(h, "/pay", "k", "a")
			if first.Body.String() != secretBody || first.Header().Get("X-Customer") != "Ada Lovelace" {
				t.Errorf("the first client got %q %v, want the full response", first.Body, first.Header())
			}
			want := `{"card":"****","name":"Ada Lovelace"}`
			w := post(h, "/pay", "k", "a")
			if w.Code != 201 || w.Body.String() != want || w.Header().Get("X-Customer") != "" || w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("replay: %d %q %v", w.Code, w.Body, w.Header())
			}
			if tc.opts == nil {
				if rec := s.raw(Scope("", "POST", ""), "k"); string(rec.Response.Body) != want || rec.Response.Status != 201 {
					t.Errorf("stored %d %q", rec.Response.Status, rec.Response.Body)
				}
			}
		})
	}
}

func TestRedactDo(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s, WithRedact(func(_ context.Context, r Response) Response {
		r.Body = bytes.ReplaceAll(r.Body, []byte("secret"), []byte("******"))
		return r
	}))
	fn := func(context.Context) ([]byte, error) { return []byte("token secret"), nil }
	v, _, err := e.Do(t.Context(), op("k", "a"), fn)
	if err != nil || string(v) != "token secret" {
		t.Fatalf("first: %q %v, want the full value", v, err)
	}
	v, replayed, err := e.Do(t.Context(), op("k", "a"), fn)
	if err != nil || !replayed || string(v) != "token ******" {
		t.Errorf("replay: %q %v %v", v, replayed, err)
	}
}

func TestReplayHook(t *testing.T) {
	s := newTestStore()
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := created
	e, _ := newEngine(t, s, WithClock(func() time.Time { return clock }), WithReplayHook(func(_ context.Context, r *Response, at time.Time) {
		r.Header.Set("Idempotent-Replayed-At", at.UTC().Format(http.TimeFormat))
		r.Header.Del("X-Customer")
		r.Body = append(r.Body, '\n')
	}))
	runs := 0
	h := e.Middleware()(paymentHandler(&runs))
	if w := post(h, "/pay", "k", "a"); w.Header().Get("Idempotent-Replayed-At") != "" {
		t.Error("the hook ran on the first response")
	}
	clock = clock.Add(time.Minute)
	w := post(h, "/pay", "k", "a")
	if w.Header().Get("Idempotent-Replayed-At") != "Tue, 01 Dec 2026 10:00:00 GMT" || w.Header().Get("X-Customer") != "" ||
		w.Body.String() != secretBody+"\n" || w.Header().Get("Content-Length") != "53" {
		t.Errorf("replay: %q %v", w.Body, w.Header())
	}
	// The hook changed a copy: the stored record is as it was.
	if rec := s.raw(Scope("", "POST", ""), "k"); rec.Response.Header.Get("X-Customer") == "" || string(rec.Response.Body) != secretBody {
		t.Errorf("the hook changed the stored record: %+v", rec.Response)
	}
	// Start hands the hook's copy too.
	_, resp, err := e.Start(t.Context(), Op{Kind: "POST", Key: "k", Fingerprint: Fingerprint("POST", "/pay", []byte("a"))})
	if err != nil || resp == nil || resp.Header.Get("Idempotent-Replayed-At") == "" {
		t.Errorf("Start: %+v %v", resp, err)
	}
}

func TestHookOptions(t *testing.T) {
	for name, o := range map[string]Option{"redact": WithRedact(nil), "replay hook": WithReplayHook(nil)} {
		if _, err := New(newTestStore(), o); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRedactDoNewResponse: a redact function that returns a Response of
// its own (not the one it was given) still stores a Do value: the kind of
// result is the engine's, like the status.
func TestRedactDoNewResponse(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s, WithRedact(func(_ context.Context, r Response) Response {
		return Response{Body: bytes.ReplaceAll(r.Body, []byte("secret"), []byte("******"))}
	}))
	fn := func(context.Context) ([]byte, error) { return []byte("token secret"), nil }
	if _, _, err := e.Do(t.Context(), op("k", "a"), fn); err != nil {
		t.Fatal(err)
	}
	v, replayed, err := e.Do(t.Context(), op("k", "a"), fn)
	if err != nil || !replayed || string(v) != "token ******" {
		t.Errorf("replay: %q %v %v", v, replayed, err)
	}
}
