package idemgin_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

// renderErrors is an error-rendering middleware of the usual kind: once the
// handlers returned, it turns c.Errors into a JSON page, with the status
// the handlers set, or 500 when they set none.
func renderErrors(c *gin.Context) {
	c.Next()
	if len(c.Errors) == 0 || c.Writer.Written() {
		return
	}
	code := c.Writer.Status()
	if code == http.StatusOK {
		code = http.StatusInternalServerError
	}
	c.JSON(code, gin.H{"errors": c.Errors.Errors()})
}

// stored reports whether store holds a record for key on POST route.
func stored(t *testing.T, s *memstore.Store, route, key string) bool {
	t.Helper()
	_, ok, err := s.Get(context.Background(), store.Ref{Scope: idem.Scope("", "POST", route), Key: key}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// reason returns the X-Reason header as sent (the recorder's own map
// keeps changes made after the status was written).
func reason(w *httptest.ResponseRecorder) string { return w.Result().Header.Get("X-Reason") }

// TestErrorsRenderedOutside checks a handler that leaves its errors in
// c.Errors, writing no body, for a middleware mounted before the
// idempotency middleware to render: that middleware writes the page, the
// key is released and nothing is stored, so the retry runs the handler
// again. Mounted after the idempotency middleware, the renderer's page is
// the response, stored and replayed.
func TestErrorsRenderedOutside(t *testing.T) {
	errStock := errors.New("out of stock")
	for _, tc := range []struct {
		name     string
		renderer gin.HandlerFunc
		handler  gin.HandlerFunc
		code     int
		body     string
		header   string // X-Reason expected
	}{
		{"c.Error", renderErrors, func(c *gin.Context) { _ = c.Error(errStock) },
			500, `{"errors":["out of stock"]}`, ""},
		{"c.Error and Abort", renderErrors, func(c *gin.Context) { _ = c.Error(errStock); c.Abort() },
			500, `{"errors":["out of stock"]}`, ""},
		{"status, header, c.Error", renderErrors, func(c *gin.Context) {
			c.Status(http.StatusConflict)
			c.Header("X-Reason", "stock")
			_ = c.Error(errStock)
		}, 409, `{"errors":["out of stock"]}`, "stock"},
		// AbortWithError writes the status now: Gin's ErrorLogger writes
		// the body under it.
		{"AbortWithError, ErrorLogger", gin.ErrorLogger(), func(c *gin.Context) {
			c.Header("X-Reason", "stock")
			_ = c.AbortWithError(http.StatusUnprocessableEntity, errStock)
			c.Header("X-Reason", "too late") // no effect, as with Gin
		}, 422, `{"error":"out of stock"}`, "stock"},
		// A render that fails (c.JSON sets 200, then Marshal fails and
		// Gin records the error and aborts): the renderer's page, as
		// without the middleware, never a stored empty 200.
		{"failed render", renderErrors, func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"x": math.NaN()}) },
			500, `{"errors":["json: unsupported value: NaN"]}`, ""},
		// AbortWithError and a renderer that leaves written responses
		// alone: the bare status, as without the middleware.
		{"AbortWithError, bare", renderErrors, func(c *gin.Context) {
			_ = c.AbortWithError(http.StatusForbidden, errStock)
		}, 403, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Without the middleware, for reference: the same answer.
			plain := gin.New()
			plain.Use(recovery(), tc.renderer)
			plain.POST("/w", tc.handler)
			w := send(plain, "POST", "/w", "", "")
			if w.Code != tc.code || w.Body.String() != tc.body || reason(w) != tc.header {
				t.Fatalf("without the middleware: %d %q X-Reason=%q, want %d %q %q", w.Code, w.Body, reason(w), tc.code, tc.body, tc.header)
			}

			for _, m := range []struct {
				name  string
				build func(mw gin.HandlerFunc, h gin.HandlerFunc) *gin.Engine
			}{
				{"global", func(mw, h gin.HandlerFunc) *gin.Engine {
					r := gin.New()
					r.Use(recovery(), tc.renderer, mw)
					r.POST("/w", h)
					return r
				}},
				{"route", func(mw, h gin.HandlerFunc) *gin.Engine {
					r := gin.New()
					r.Use(recovery(), tc.renderer)
					r.POST("/w", mw, h)
					return r
				}},
				{"nested", func(mw, h gin.HandlerFunc) *gin.Engine {
					r := gin.New()
					r.Use(recovery(), tc.renderer, mw)
					r.POST("/w", mw, h)
					return r
				}},
			} {
				t.Run(m.name, func(t *testing.T) {
					store := memstore.New()
					defer store.Close()
					ev := &events{}
					e, err := idem.New(store, idem.WithObserver(ev.observe))
					if err != nil {
						t.Fatal(err)
					}
					runs := 0
					r := m.build(idemgin.Middleware(e), func(c *gin.Context) { runs++; tc.handler(c) })
					for i := range 2 {
						w := send(r, "POST", "/w", "err-key", "")
						if w.Code != tc.code || w.Body.String() != tc.body || reason(w) != tc.header || replayed(w) {
							t.Errorf("request %d: %d %q X-Reason=%q replayed=%v, want %d %q %q", i, w.Code, w.Body, reason(w), replayed(w), tc.code, tc.body, tc.header)
						}
						if o := ev.last(t).Outcome; o != idem.OutcomeReleased {
							t.Errorf("request %d: outcome %q, want released", i, o)
						}
						if stored(t, store, "/w", "err-key") {
							t.Errorf("request %d: a record is stored", i)
						}
					}
					if runs != 2 {
						t.Errorf("handler ran %d times, want 2 (the key is released)", runs)
					}
				})
			}

			t.Run("renderer inside", func(t *testing.T) {
				store := memstore.New()
				defer store.Close()
				e, err := idem.New(store)
				if err != nil {
					t.Fatal(err)
				}
				runs := 0
				r := gin.New()
				r.Use(recovery(), idemgin.Middleware(e), tc.renderer)
				r.POST("/w", func(c *gin.Context) { runs++; tc.handler(c) })
				for i := range 2 {
					w := send(r, "POST", "/w", "err-key", "")
					if w.Code != tc.code || w.Body.String() != tc.body || reason(w) != tc.header {
						t.Errorf("request %d: %d %q X-Reason=%q, want %d %q %q", i, w.Code, w.Body, reason(w), tc.code, tc.body, tc.header)
					}
					// 5xx is released by the default rule; other pages are
					// stored, unless there is none (a bare status with
					// c.Errors is left outside).
					kept := tc.code < 500 && tc.body != ""
					if replayed(w) != (kept && i == 1) {
						t.Errorf("request %d: replayed=%v", i, replayed(w))
					}
					if stored(t, store, "/w", "err-key") != kept {
						t.Errorf("request %d: stored=%v, want %v", i, !kept, kept)
					}
				}
				if want := map[bool]int{true: 1, false: 2}[tc.code < 500 && tc.body != ""]; runs != want {
					t.Errorf("handler ran %d times, want %d", runs, want)
				}
			})
		})
	}
}

// TestErrorsAfterSuccess checks that a handler that sets a success status
// and logs an error in c.Errors has its response stored and replayed: it
// succeeded, and the middleware outside finds the response written.
func TestErrorsAfterSuccess(t *testing.T) {
	e, _ := newEngine(t)
	runs := 0
	r := gin.New()
	r.Use(recovery(), renderErrors, idemgin.Middleware(e))
	r.POST("/w", func(c *gin.Context) {
		runs++
		c.Status(http.StatusCreated)
		_ = c.Error(errors.New("audit log unavailable"))
	})
	for i := range 2 {
		w := send(r, "POST", "/w", "k", "")
		if w.Code != http.StatusCreated || w.Body.Len() != 0 || replayed(w) != (i == 1) {
			t.Errorf("request %d: %d %q replayed=%v, want 201 and no page", i, w.Code, w.Body, replayed(w))
		}
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
}

// TestErrorsWithoutClaim checks that a request the engine lets through (an
// optional key that is absent; a store that fails, failing open) leaves
// an unwritten response with c.Errors to the renderer outside as well.
func TestErrorsWithoutClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store idem.Store
		opts  []idem.Option
		route []idem.HTTPOption
		key   string
	}{
		{"optional key absent", memstore.New(), nil, []idem.HTTPOption{idem.Optional()}, ""},
		{"fail open", failingStore{}, []idem.Option{idem.WithFailOpen(), idem.WithObserver(func(context.Context, idem.Event) {})}, nil, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := idem.New(tc.store, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			r := gin.New()
			r.Use(recovery(), renderErrors, idemgin.Middleware(e, tc.route...))
			r.POST("/w", func(c *gin.Context) { c.Status(http.StatusConflict); _ = c.Error(errors.New("taken")) })
			w := send(r, "POST", "/w", tc.key, "")
			if w.Code != 409 || w.Body.String() != `{"errors":["taken"]}` {
				t.Errorf("%d %q, want the renderer's 409 page", w.Code, w.Body)
			}
		})
	}
}

// failingStore fails every call.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Claim(context.Context, store.Claim) (store.ClaimResult, error) {
	return store.ClaimResult{}, errDown
}

func (failingStore) Complete(context.Context, store.Hold, store.Completion) error { return errDown }

func (failingStore) Release(context.Context, store.Hold) error { return errDown }
