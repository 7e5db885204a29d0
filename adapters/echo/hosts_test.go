package idemecho_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	idemecho "github.com/idemkit/idem/adapters/echo"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// TestHostRoutersKeepTheirScopes: the same route template on two
// Echo.Host routers is two routes: the same key sent to both runs both.
func TestHostRoutersKeepTheirScopes(t *testing.T) {
	eng, _ := newEngine(t)
	e := echo.New()
	e.Use(idemecho.Middleware(eng))
	runs := map[string]int{}
	for _, host := range []string{"a.example", "b.example"} {
		e.Host(host).POST("/orders", func(c echo.Context) error { runs[host]++; return c.String(201, host) })
	}
	for _, host := range []string{"a.example", "b.example"} {
		r := httptest.NewRequest("POST", "http://"+host+"/orders", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code != 201 || w.Body.String() != host || runs[host] != 1 {
			t.Errorf("%s: %d %q (runs %v); want its own handler's answer", host, w.Code, w.Body, runs)
		}
	}
}

// TestDecompressedRequestBody: behind Echo's Decompress middleware, which
// replaces the body but keeps the compressed Content-Length, the handler
// gets the whole decompressed body.
func TestDecompressedRequestBody(t *testing.T) {
	eng, _ := newEngine(t)
	e := echo.New()
	e.Use(middleware.Decompress(), idemecho.Middleware(eng))
	var got string
	e.POST("/orders", func(c echo.Context) error {
		b, _ := io.ReadAll(c.Request().Body)
		got = string(b)
		return c.String(201, "ok")
	})
	plain := `{"item":"book","note":"` + strings.Repeat("x", 200) + `"}`
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(plain))
	zw.Close()
	r := httptest.NewRequest("POST", "/orders", bytes.NewReader(buf.Bytes()))
	r.Header.Set("Content-Encoding", "gzip")
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	if w.Code != 201 || got != plain {
		t.Errorf("%d %s, handler got %d bytes; want 201 and %d", w.Code, w.Body, len(got), len(plain))
	}
}
