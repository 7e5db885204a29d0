package idemfiber_test

import (
	"bufio"
	"io"
	"maps"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
)

// listen serves app on a free loopback port until the test ends, and
// returns its address.
func listen(t testing.TB, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	}()
	t.Cleanup(func() {
		// Keep-alive connections of the tests' clients would hold the
		// shutdown until they time out.
		http.DefaultClient.CloseIdleConnections()
		_ = app.ShutdownWithTimeout(10 * time.Second)
		<-done
	})
	return ln.Addr().String()
}

// forward returns an http.Handler that sends each request, as it is, to
// the server at addr over a new loopback connection and copies its
// answer back. Unlike an http.Client it sends header values the client
// would refuse (control characters), so that the server sees them.
func forward(addr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer conn.Close()
		out := r.Clone(r.Context())
		out.Close = true
		if err := out.Write(conn); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
}
