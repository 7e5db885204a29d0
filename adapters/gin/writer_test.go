package idemgin_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
)

// TestGinWriter covers Gin's ways of writing a response: each is captured,
// stored and replayed with the handler run once.
func TestGinWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler gin.HandlerFunc
		code    int
		body    string
		header  string // X-Late header value expected
	}{
		{"status only", func(c *gin.Context) { c.Status(201) }, 201, "", ""},
		{"status then header", func(c *gin.Context) { c.Status(202); c.Header("X-Late", "yes") }, 202, "", "yes"},
		{"no write at all", func(c *gin.Context) {}, 200, "", ""},
		{"AbortWithStatus", func(c *gin.Context) { c.AbortWithStatus(403) }, 403, "", ""},
		{"AbortWithStatusJSON", func(c *gin.Context) { c.AbortWithStatusJSON(409, gin.H{"e": "dup"}) }, 409, `{"e":"dup"}`, ""},
		{"WriteString", func(c *gin.Context) {
			c.Header("X-Late", "ws")
			c.Writer.WriteHeader(201)
			c.Writer.WriteString("hello ")
			c.Writer.WriteString("world")
		}, 201, "hello world", "ws"},
		{"String with format", func(c *gin.Context) { c.String(200, "n=%d", 3) }, 200, "n=3", ""},
		{"JSON", func(c *gin.Context) { c.JSON(201, gin.H{"id": 1}) }, 201, `{"id":1}`, ""},
		{"204 via JSON", func(c *gin.Context) { c.JSON(204, nil) }, 204, "", ""},
		{"redirect", func(c *gin.Context) { c.Redirect(303, "/elsewhere") }, 303, "", ""},
		{"error page", func(c *gin.Context) { _ = c.Error(errors.New("out of stock")); c.Abort() }, 409, `{"errors":["out of stock"]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t)
			runs := 0
			r := gin.New()
			r.Use(recovery(), idemgin.Middleware(e), errorPages)
			r.POST("/w", func(c *gin.Context) { runs++; tc.handler(c) })
			for i := range 2 {
				w := send(r, "POST", "/w", "key", "")
				if w.Code != tc.code || w.Body.String() != tc.body || w.Header().Get("X-Late") != tc.header {
					t.Errorf("request %d: %d %q X-Late=%q, want %d %q %q", i, w.Code, w.Body, w.Header().Get("X-Late"), tc.code, tc.body, tc.header)
				}
				if replayed(w) != (i == 1) {
					t.Errorf("request %d: replayed=%v", i, replayed(w))
				}
			}
			if runs != 1 {
				t.Errorf("handler ran %d times, want 1", runs)
			}
		})
	}
}

// errorPages is an error-page middleware: it turns c.Errors into a 409
// JSON page once the handlers returned.
func errorPages(c *gin.Context) {
	c.Next()
	if len(c.Errors) > 0 && !c.Writer.Written() {
		c.JSON(409, gin.H{"errors": c.Errors.Errors()})
	}
}

// TestStreaming checks that a handler that flushes streams through Gin's
// writer, and that the retry gets the status and headers without the body.
func TestStreaming(t *testing.T) {
	e, ev := newEngine(t)
	runs := 0
	r := gin.New()
	r.Use(idemgin.Middleware(e))
	r.POST("/stream", func(c *gin.Context) {
		runs++
		c.Header("Content-Type", "text/event-stream")
		c.Status(200)
		for i := range 3 {
			c.SSEvent("n", i)
			c.Writer.Flush()
			if !c.Writer.Written() {
				t.Error("Written is false after Flush")
			}
		}
	})
	w := send(r, "POST", "/stream", "s", "")
	if w.Code != 200 || !w.Flushed || strings.Count(w.Body.String(), "event:n") != 3 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d flushed=%v %q", w.Code, w.Flushed, w.Body)
	}
	if o := ev.last(t).Outcome; o != idem.OutcomeExecuted {
		t.Errorf("outcome %q, want executed", o)
	}
	w = send(r, "POST", "/stream", "s", "")
	if w.Code != 200 || !replayed(w) || w.Body.Len() != 0 || w.Header().Get(idem.HeaderBodyOmitted) != "true" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		t.Errorf("retry: %d replayed=%v %q omitted=%q", w.Code, replayed(w), w.Body, w.Header().Get(idem.HeaderBodyOmitted))
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
}

// TestHijack checks over a real connection that a hijacked response
// releases the key, so the retry runs again.
func TestHijack(t *testing.T) {
	e, ev := newEngine(t)
	runs := 0
	r := gin.New()
	r.Use(idemgin.Middleware(e))
	r.POST("/ws", func(c *gin.Context) {
		runs++
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			c.Status(500)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nraw ok")
		rw.Flush()
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	for range 2 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "POST /ws HTTP/1.1\r\nHost: x\r\nIdempotency-Key: h\r\nContent-Length: 0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 200 || string(b) != "raw ok" {
			t.Errorf("hijacked answer: %d %q", resp.StatusCode, b)
		}
	}
	if runs != 2 {
		t.Errorf("handler ran %d times, want 2 (the key is released)", runs)
	}
	if o := ev.last(t).Outcome; o != idem.OutcomeReleased {
		t.Errorf("outcome %q, want released", o)
	}
}

// TestWriterMethods checks the rest of gin.ResponseWriter on the writer
// the handlers see, over a real connection.
func TestWriterMethods(t *testing.T) {
	e, _ := newEngine(t)
	r := gin.New()
	r.Use(idemgin.Middleware(e))
	r.POST("/m", func(c *gin.Context) {
		w := c.Writer
		var errs []string
		check := func(ok bool, what string) {
			if !ok {
				errs = append(errs, what)
			}
		}
		check(w.Status() == 200 && w.Size() == -1 && !w.Written(), "fresh writer state")
		check(w.CloseNotify() != nil, "CloseNotify")
		check(w.Pusher() == nil, "Pusher under a claim")
		check(http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)) == nil, "ResponseController reaches the connection")
		w.WriteHeader(http.StatusEarlyHints) // goes straight through
		c.Status(201)
		check(w.Status() == 201 && !w.Written(), "status is lazy")
		w.WriteString("abc")
		check(w.Size() == 3 && w.Written(), "size after a write")
		w.WriteHeader(202) // too late: ignored, as in Gin
		check(w.Status() == 201, "status after the body")
		_, _, err := w.Hijack()
		check(err != nil, "hijack after the body fails")
		c.Writer.Write([]byte(strings.Join(errs, ",")))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	for i := range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/m", nil)
		req.Header.Set("Idempotency-Key", "m")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || string(b) != "abc" || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Errorf("request %d: %d %q replayed=%q; failed checks after abc", i, resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed"))
		}
	}
}
