package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idem/core"
)

// Fixture is the set of routes that exercises every behaviour of the
// engine. RunHTTP mounts it through each adapter in-process, and
// examples/fixture serves it over a real socket. Every handler call but
// GET /counter and POST /reset adds 1 to the fixture's counter. The routes:
//
//   - POST /echo: 201, the request body back with its Content-Type
//   - PATCH /echo: 200, the same
//   - POST /status/{code}: that status, text/plain "status:{code}"
//   - POST /slow?ms=N: waits N ms, then 200 "slept:N"
//   - POST /large?bytes=N: 200 with N bytes of 'x'
//   - POST /items/{id}: 201 "item:{id}"
//   - POST /cookie: 201 with a fresh Set-Cookie: session=... and "cookie"
//   - POST /optional: the key is optional; 201 "optional"
//   - POST /panic: panics (the framework's recovery answers 500)
//   - GET /counter: 200 {"count":N}
//   - POST /reset: 204, the counter back to 0; not behind the middleware
type Fixture struct {
	count atomic.Int64
	http  []idem.HTTPOption
}

// NewFixture returns a fixture whose counter is 0. opts are the HTTP
// options every middleware gets, before a route's own (Route.Options,
// GlobalOptions, HTTPOptions): RunHTTP's scenarios set the namespace
// function, the body caps, the replay header and the problem type base
// with them.
func NewFixture(opts ...idem.HTTPOption) *Fixture { return &Fixture{http: opts} }

// Count returns how many times a counted handler ran.
func (f *Fixture) Count() int64 { return f.count.Load() }

// Route is one fixture route, described so that any router can mount it.
type Route struct {
	// Method is the HTTP method.
	Method string
	// Path is the route template in ServeMux and Chi syntax
	// ("/status/{code}"); ColonPath gives the Gin and Echo syntax.
	Path string
	// Protected reports whether the route sits behind the idempotency
	// middleware (all but POST /reset).
	Protected bool
	// Options are the options to give the middleware where the route is
	// declared: the fixture's HTTP options, then the route's own
	// (idem.Optional() on POST /optional).
	Options []idem.HTTPOption
	// Handler serves the route. param returns a path parameter by name
	// (r.PathValue, chi.URLParam, c.Param).
	Handler func(w http.ResponseWriter, r *http.Request, param func(string) string)
}

// ColonPath returns Path in Gin and Echo syntax: "/status/:code".
func (rt Route) ColonPath() string {
	parts := strings.Split(rt.Path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = ":" + p[1:len(p)-1]
		}
	}
	return strings.Join(parts, "/")
}

// GlobalOptions are the options for middleware mounted once at the top of
// a router: the fixture's HTTP options, and rules that make POST
// /optional optional and leave POST /reset untouched, as the per-route
// Options and Protected fields do.
func (f *Fixture) GlobalOptions() []idem.HTTPOption {
	return append(f.with(), // a copy: the caller may append
		idem.ForRoute(http.MethodPost, "/optional", idem.Optional()),
		idem.ForRoute(http.MethodPost, "/reset", idem.Skip()),
	)
}

// HTTPOptions returns a copy of the fixture's HTTP options: what a
// middleware shared by several routes (a group's) gets. A route whose
// Options are longer has options of its own.
func (f *Fixture) HTTPOptions() []idem.HTTPOption { return f.with() }

// with returns a copy of the fixture's HTTP options followed by opts.
func (f *Fixture) with(opts ...idem.HTTPOption) []idem.HTTPOption {
	return append(append(make([]idem.HTTPOption, 0, len(f.http)+len(opts)+2), f.http...), opts...)
}

// Namespace is the fixture's namespace function: the name in
// "Authorization: Bearer <name>", or "" (global) without one.
func Namespace(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// Routes returns the fixture's routes.
func (f *Fixture) Routes() []Route {
	counted := func(h func(w http.ResponseWriter, r *http.Request, param func(string) string)) func(http.ResponseWriter, *http.Request, func(string) string) {
		return func(w http.ResponseWriter, r *http.Request, param func(string) string) {
			f.count.Add(1)
			h(w, r, param)
		}
	}
	routes := []Route{
		{Method: http.MethodPost, Path: "/echo", Protected: true, Handler: counted(echo(http.StatusCreated))},
		{Method: http.MethodPatch, Path: "/echo", Protected: true, Handler: counted(echo(http.StatusOK))},
		{Method: http.MethodPost, Path: "/status/{code}", Protected: true, Handler: counted(status)},
		{Method: http.MethodPost, Path: "/slow", Protected: true, Handler: counted(slow)},
		{Method: http.MethodPost, Path: "/large", Protected: true, Handler: counted(large)},
		{Method: http.MethodPost, Path: "/items/{id}", Protected: true, Handler: counted(item)},
		{Method: http.MethodPost, Path: "/cookie", Protected: true, Handler: counted(cookie)},
		{Method: http.MethodPost, Path: "/optional", Protected: true, Options: []idem.HTTPOption{idem.Optional()}, Handler: counted(text(http.StatusCreated, "optional"))},
		{Method: http.MethodPost, Path: "/panic", Protected: true, Handler: counted(func(http.ResponseWriter, *http.Request, func(string) string) {
			panic("conformance: the /panic route panics")
		})},
		{Method: http.MethodGet, Path: "/counter", Protected: true, Handler: func(w http.ResponseWriter, _ *http.Request, _ func(string) string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"count":%d}`, f.count.Load())
		}},
		{Method: http.MethodPost, Path: "/reset", Handler: func(w http.ResponseWriter, _ *http.Request, _ func(string) string) {
			f.count.Store(0)
			w.WriteHeader(http.StatusNoContent)
		}},
	}
	for i := range routes {
		if routes[i].Protected {
			routes[i].Options = f.with(routes[i].Options...)
		}
	}
	return routes
}

// ServeMux returns a ServeMux with every route mounted, the protected
// ones behind mw (built per route with the route's Options), and panics
// answered with 500 by Recoverer.
func (f *Fixture) ServeMux(mw func(opts ...idem.HTTPOption) func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range f.Routes() {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rt.Handler(w, r, r.PathValue)
		})
		if rt.Protected {
			h = mw(rt.Options...)(h)
		}
		mux.Handle(rt.Method+" "+rt.Path, h)
	}
	return Recoverer(mux)
}

// Recoverer answers 500 when next panics, as the frameworks' recovery
// middleware do. http.ErrAbortHandler is passed on.
func Recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				http.Error(w, "internal server error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func text(code int, body string) func(http.ResponseWriter, *http.Request, func(string) string) {
	return func(w http.ResponseWriter, _ *http.Request, _ func(string) string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		if code != http.StatusNoContent && code != http.StatusNotModified {
			io.WriteString(w, body)
		}
	}
}

func echo(code int) func(http.ResponseWriter, *http.Request, func(string) string) {
	return func(w http.ResponseWriter, r *http.Request, _ func(string) string) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(code)
		w.Write(body)
	}
}

func status(w http.ResponseWriter, r *http.Request, param func(string) string) {
	raw := param("code")
	code, err := strconv.Atoi(raw)
	if err != nil || code < 200 || code > 599 {
		http.Error(w, "code must be a status from 200 to 599", http.StatusBadRequest)
		return
	}
	text(code, "status:"+raw)(w, r, param)
}

func slow(w http.ResponseWriter, r *http.Request, param func(string) string) {
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	if err != nil || ms < 0 || ms > 60_000 {
		http.Error(w, "ms must be 0 to 60000", http.StatusBadRequest)
		return
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	text(http.StatusOK, "slept:"+strconv.Itoa(ms))(w, r, param)
}

func large(w http.ResponseWriter, r *http.Request, _ func(string) string) {
	n, err := strconv.Atoi(r.URL.Query().Get("bytes"))
	if err != nil || n < 0 || n > 64<<20 {
		http.Error(w, "bytes must be 0 to 67108864", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	chunk := []byte(strings.Repeat("x", 32<<10))
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

func item(w http.ResponseWriter, r *http.Request, param func(string) string) {
	text(http.StatusCreated, "item:"+param("id"))(w, r, param)
}

func cookie(w http.ResponseWriter, r *http.Request, param func(string) string) {
	var b [16]byte
	rand.Read(b[:])
	http.SetCookie(w, &http.Cookie{Name: "session", Value: hex.EncodeToString(b[:]), Path: "/", HttpOnly: true})
	text(http.StatusCreated, "cookie")(w, r, param)
}
