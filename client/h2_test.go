package idemclient

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestHTTP2Retries sends over HTTP/2 (unencrypted, over in-memory
// connections) to a real net/http server that ends the first attempt as
// the case says, and checks that the transport retries it with the same
// key and body, as it retries the HTTP/1 equivalent (EOF).
func TestHTTP2Retries(t *testing.T) {
	for _, tc := range []struct {
		name string
		// first ends the first attempt, inside the handler; srvs are the
		// servers, one per connection dialled.
		first   func(srvs []*http.Server) step
		servers int
		err     string // in the first attempt's error
	}{
		{"a stream reset with INTERNAL_ERROR (the handler panicked)", func([]*http.Server) step {
			return func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }
		}, 1, "INTERNAL_ERROR"},
		{"GOAWAY, then the connection closed (the server shutting down)", func(srvs []*http.Server) step {
			return func(_ http.ResponseWriter, r *http.Request) {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					srvs[0].Shutdown(ctx) // sends GOAWAY, waits a second for this handler
					srvs[0].Close()
				}()
				<-r.Context().Done()
			}
		}, 2, "server sent GOAWAY and closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &fakeServer{}
				var attempts []Attempt
				base, srvs := h2PipeServers(t, srv, tc.servers)
				srv.steps = []step{tc.first(srvs)}
				tr := newTransport(t, base, WithOnAttempt(func(a Attempt) { attempts = append(attempts, a) }))
				resp, body, err := post(t, t.Context(), tr, `{"item":"book"}`)
				if err != nil {
					t.Fatalf("not retried: %v", err)
				}
				if r, _ := ResultOf(resp); resp.ProtoMajor != 2 || resp.StatusCode != 201 || body != "created" || r.Attempts != 2 {
					t.Errorf("got %s %d %q after %d attempts, want HTTP/2 201 after 2", resp.Proto, resp.StatusCode, body, r.Attempts)
				}
				if len(attempts) != 2 || attempts[0].Err == nil || !strings.Contains(attempts[0].Err.Error(), tc.err) || !attempts[0].Retry {
					t.Errorf("attempts %+v, want the first failed with %q and retried", attempts, tc.err)
				}
				seen := srv.seen()
				checkBodies(t, srv, 2, `{"item":"book"}`)
				if len(seen) == 2 && (seen[0].key == "" || seen[0].key != seen[1].key) {
					t.Errorf("keys %q and %q, want the same key twice", seen[0].key, seen[1].key)
				}
			})
		})
	}
}

// h2PipeServers starts n servers of h that speak unencrypted HTTP/2 over
// in-memory connections, and returns a transport that speaks only that
// and dials the i-th server for its i-th connection (the last one for
// every later connection), with the servers. All stop when the test ends.
func h2PipeServers(t *testing.T, h http.Handler, n int) (*http.Transport, []*http.Server) {
	t.Helper()
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	var lns []*pipeListener
	var srvs []*http.Server
	for range n {
		ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		srv := &http.Server{Handler: h, Protocols: h2, ErrorLog: log.New(io.Discard, "", 0)}
		served := make(chan struct{})
		go func() { srv.Serve(ln); close(served) }()
		t.Cleanup(func() { srv.Close(); <-served })
		lns, srvs = append(lns, ln), append(srvs, srv)
	}
	dials := 0
	tr := &http.Transport{Protocols: h2, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		ln := lns[min(dials, len(lns)-1)]
		dials++
		return ln.dial(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, srvs
}
