package idem

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The middleware-order matrix of issue 16 for the net/http middleware:
// handlers that rewrite the path or the method, before idem, between idem
// and the ServeMux, and between the ServeMux and idem.

// stripSlash removes a trailing slash from the path.
func stripSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			r.URL.Path = strings.TrimSuffix(p, "/")
		}
		next.ServeHTTP(w, r)
	})
}

// overrideMethod sets the method from X-HTTP-Method-Override, for any
// method: the most a method override can do.
func overrideMethod(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := r.Header.Get("X-HTTP-Method-Override"); m != "" {
			r.Method = m
		}
		next.ServeHTTP(w, r)
	})
}

func stripV1(next http.Handler) http.Handler { return http.StripPrefix("/v1", next) }

func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

var quiet = log.New(io.Discard, "", 0)

func logger(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		quiet.Println(r.Method, r.URL.Path)
		next.ServeHTTP(w, r)
	})
}

// A rewriteVariant is a request a rewriting handler may route to a
// protected handler.
type rewriteVariant struct{ method, target, override string }

var rewriters = []struct {
	name     string
	h        func(http.Handler) http.Handler
	variants []rewriteVariant
}{
	{"strip slash", stripSlash, []rewriteVariant{{"POST", "/orders/7/", ""}, {"POST", "/orders/", ""}}},
	{"StripPrefix", stripV1, []rewriteVariant{{"POST", "/v1/orders/7", ""}}},
	{"method override", overrideMethod, []rewriteVariant{{"GET", "/orders/7", "POST"}, {"POST", "/orders/7", "PUT"}, {"GET", "/orders/7", "PATCH"}}},
	{"recoverer", recoverer, nil},
	{"logger", logger, nil},
}

type muxCounts struct{ protected, other atomic.Int64 }

// orderMux serves POST /orders, POST and PATCH /orders/{id} (protected,
// each behind wrap) and GET and PUT /orders/{id} (not).
func orderMux(n *muxCounts, wrap func(http.Handler) http.Handler) *http.ServeMux {
	prot := wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.protected.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	}))
	other := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.other.Add(1)
		io.WriteString(w, "other")
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", prot)
	mux.Handle("POST /orders/{id}", prot)
	mux.Handle("PATCH /orders/{id}", prot)
	mux.Handle("GET /orders/{id}", other)
	mux.Handle("PUT /orders/{id}", other)
	return mux
}

func same(h http.Handler) http.Handler { return h }

// muxPlacements are where idem and the rewriting handler go; works says
// a variant must reach its route, protected (the rewrite comes before
// idem and before the mux routes).
var muxPlacements = []struct {
	name  string
	works bool
	build func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler
}{
	{"rewrite, idem, mux", true, func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler {
		return m(idem(orderMux(n, same)))
	}},
	{"idem, rewrite, mux", false, func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler {
		return idem(m(orderMux(n, same)))
	}},
	{"rewrite, mux, idem on the handlers", true, func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler {
		return m(orderMux(n, idem))
	}},
	{"mux, rewrite, idem on the handlers", false, func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler {
		return orderMux(n, func(h http.Handler) http.Handler { return m(idem(h)) })
	}},
	{"mux, idem, rewrite on the handlers", false, func(m, idem func(http.Handler) http.Handler, n *muxCounts) http.Handler {
		return orderMux(n, func(h http.Handler) http.Handler { return idem(m(h)) })
	}},
}

func sendRewrite(h http.Handler, v rewriteVariant, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(v.method, v.target, strings.NewReader(`{"n":1}`))
	if v.override != "" {
		r.Header.Set("X-HTTP-Method-Override", v.override)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMiddlewareRewrites checks, for each rewriting handler and each
// place of it and of idem around a ServeMux, that a protected handler
// never runs without a key and runs once for a key sent twice, and that
// a request rewritten before idem and the mux is served as usual.
func TestMiddlewareRewrites(t *testing.T) {
	for _, pl := range muxPlacements {
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				if pl.name == "idem, rewrite, mux" && m.name == "method override" {
					t.Skip("documented: idem lets a GET through, and a method override between it and the mux it cannot see turns it into a POST")
				}
				vs := append([]rewriteVariant{{"POST", "/orders/7", ""}, {"PATCH", "/orders/7", ""}}, m.variants...)
				for i, v := range vs {
					if m.name == "StripPrefix" {
						v.target = "/v1" + strings.TrimPrefix(v.target, "/v1")
					}
					e, _ := newEngine(t, newTestStore())
					n := new(muxCounts)
					h := pl.build(m.h, e.Middleware(), n)
					noKey := sendRewrite(h, v, "")
					if n.protected.Load() != 0 {
						t.Errorf("%s %s (override %q), no key: %d %q: the protected handler ran unprotected", v.method, v.target, v.override, noKey.Code, noKey.Body)
						continue
					}
					first, second := sendRewrite(h, v, "k"), sendRewrite(h, v, "k")
					switch ran := n.protected.Load(); {
					case ran > 1:
						t.Errorf("%s %s (override %q) twice with one key: the protected handler ran %d times", v.method, v.target, v.override, ran)
					case ran == 1 && noKey.Code != http.StatusBadRequest:
						t.Errorf("%s %s (override %q), no key: %d, want 400", v.method, v.target, v.override, noKey.Code)
					case ran == 1 && (first.Code != 201 || second.Code != 201 || second.Header().Get("Idempotent-Replayed") != "true"):
						t.Errorf("%s %s (override %q): %d %q then %d, want 201 and a replay", v.method, v.target, v.override, first.Code, first.Body, second.Code)
					case ran == 0 && (i < 2 || pl.works) && n.other.Load() == 0 && m.name != "StripPrefix":
						t.Errorf("%s %s (override %q): %d %q, want it served protected", v.method, v.target, v.override, first.Code, first.Body)
					}
				}
			})
		}
	}
}

// TestMiddlewareRewritesUnmatched checks that, where idem sees the mux or
// its pattern, a request the mux routes nowhere gets the mux's own 404 or
// 405 whatever its key.
func TestMiddlewareRewritesUnmatched(t *testing.T) {
	for _, pl := range muxPlacements {
		if pl.name == "idem, rewrite, mux" {
			continue // idem sees neither the mux nor a pattern: it protects every request, scoped by method and namespace
		}
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				e, ev := newEngine(t, newTestStore())
				n := new(muxCounts)
				h := pl.build(m.h, e.Middleware(), n)
				bare := pl.build(m.h, same, new(muxCounts))
				for _, v := range []rewriteVariant{{"POST", "/nope", ""}, {"PATCH", "/orders", ""}, {"DELETE", "/orders/7", ""}} {
					for _, key := range []string{"", "k", "a,b"} {
						got, want := sendRewrite(h, v, key), sendRewrite(bare, v, key)
						if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Allow") != want.Header().Get("Allow") {
							t.Errorf("%s %s key %q: %d %q, want the mux's %d %q", v.method, v.target, key, got.Code, got.Body, want.Code, want.Body)
						}
					}
				}
				if len(ev.evs) != 0 || n.protected.Load() != 0 {
					t.Errorf("the engine saw %d requests, the handlers ran %d times; want none", len(ev.evs), n.protected.Load())
				}
			})
		}
	}
}

// TestMuxRedirectPassesThrough: a ServeMux's own redirect (a missing
// trailing slash, a path to clean) is not a route: it takes no key, so
// the client that follows it with the same key runs the handler.
func TestMuxRedirectPassesThrough(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	mux := http.NewServeMux()
	runs := 0
	mux.HandleFunc("POST /users/{id}/", func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) })
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) })
	h := e.Middleware()(mux)
	for _, tc := range []struct{ from, to, key string }{
		{"/users/42", "/users/42/", "k1"},
		{"/orders/../orders", "/orders", "k2"},
	} {
		w := post(h, tc.from, tc.key, "{}")
		if w.Code/100 != 3 || w.Header().Get("Location") != tc.to {
			t.Fatalf("%s: %d to %q, want the mux's redirect to %s", tc.from, w.Code, w.Header().Get("Location"), tc.to)
		}
		before := runs
		if w := post(h, tc.to, tc.key, "{}"); w.Code != 201 || runs != before+1 {
			t.Errorf("following the redirect from %s with the same key: %d, runs +%d; want 201 from the handler", tc.from, w.Code, runs-before)
		}
	}
}

// TestMountedMuxesKeepTheirScopes: the same middleware wrapping two
// muxes mounted under different prefixes keeps their routes apart, even
// when StripPrefix makes their paths the same.
func TestMountedMuxesKeepTheirScopes(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	outer := http.NewServeMux()
	runs := map[string]int{}
	for _, v := range []string{"v1", "v2"} {
		inner := http.NewServeMux()
		inner.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
			runs[v]++
			w.WriteHeader(201)
			w.Write([]byte(v))
		})
		outer.Handle("/"+v+"/", http.StripPrefix("/"+v, e.Middleware()(inner)))
	}
	post(outer, "/v1/orders", "k", "{}")
	if w := post(outer, "/v2/orders", "k", "{}"); w.Body.String() != "v2" || runs["v2"] != 1 {
		t.Errorf("POST /v2/orders with /v1/orders' key: %d %q (runs %v); want its own handler's answer", w.Code, w.Body, runs)
	}
}

// TestBodyReplacedBeforeTheMiddleware: a body that an outer middleware
// replaced (a decompressor) is read whole, whatever the Content-Length
// that described the original says.
func TestBodyReplacedBeforeTheMiddleware(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	var got string
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(201)
	}))
	plain := strings.Repeat(`{"item":"book"}`, 20)
	r := httptest.NewRequest("POST", "/", strings.NewReader(plain))
	r.ContentLength = 40 // as the compressed body's
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 201 || got != plain {
		t.Errorf("%d, handler got %d bytes; want 201 and the %d bytes of the replaced body", w.Code, len(got), len(plain))
	}
}

// TestMountedMuxRouteNames: a mux mounted at "/", or under a prefix its
// own patterns carry, names its routes by its own patterns alone, as it
// always did (so no record changes scope); one whose prefix StripPrefix
// removed names them after the mount.
func TestMountedMuxRouteNames(t *testing.T) {
	for _, tc := range []struct {
		name, target, want string
		mount              func(outer *http.ServeMux, h http.Handler)
		inner              string
	}{
		{"at the root", "/orders", "/orders", func(o *http.ServeMux, h http.Handler) { o.Handle("/", h) }, "POST /orders"},
		{"under its own prefix", "/v1/orders", "/v1/orders", func(o *http.ServeMux, h http.Handler) { o.Handle("/v1/", h) }, "POST /v1/orders"},
		{"stripped", "/v1/orders", "/v1/ /orders", func(o *http.ServeMux, h http.Handler) { o.Handle("/v1/", http.StripPrefix("/v1", h)) }, "POST /orders"},
		// A prefix is a whole path segment: /ab/x does not carry /a.
		{"stripped, a longer segment", "/a/ab/x", "/a/ /ab/x", func(o *http.ServeMux, h http.Handler) { o.Handle("/a/", http.StripPrefix("/a", h)) }, "POST /ab/x"},
		// A host names no path: a mux mounted at a host's root keeps its names.
		{"at a host's root", "/orders", "/orders", func(o *http.ServeMux, h http.Handler) { o.Handle("example.com/", h) }, "POST /orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ev := newEngine(t, newTestStore())
			inner := http.NewServeMux()
			inner.HandleFunc(tc.inner, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
			outer := http.NewServeMux()
			tc.mount(outer, e.Middleware()(inner))
			if w := post(outer, tc.target, "k", "{}"); w.Code != 201 {
				t.Fatalf("%d", w.Code)
			}
			if evs := ev.evs; len(evs) != 1 || evs[0].Route != tc.want {
				t.Errorf("events %+v, want the route %q", evs, tc.want)
			}
		})
	}
}
