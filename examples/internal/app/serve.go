// Package app holds what every example program shares: the store flags,
// opening the chosen store, and serving until SIGINT or SIGTERM.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Serve listens on addr, prints exactly one line "listening on
// http://HOST:PORT" to stdout once it accepts connections, logs one
// start-up record naming the program (what), its store and the address,
// and serves h
// until ctx ends or the process gets SIGINT or SIGTERM; then it shuts down
// gracefully, letting requests in flight finish, and runs each of after
// (such as idem's Engine.Close, which lands completions still pending),
// all within 10 seconds.
func Serve(ctx context.Context, what, store, addr string, h http.Handler, after ...func(context.Context) error) error {
	return ServeWith(ctx, what, store, addr, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, after...)
}

// Server is an HTTP server that is not net/http's own (Fiber's App
// behind a small wrapper): Serve serves ln until Shutdown, which lets
// requests in flight finish; Serve then returns nil or
// http.ErrServerClosed.
type Server interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// ServeWith is Serve with the server given: srv serves the listener
// instead of a net/http server.
func ServeWith(ctx context.Context, what, store, addr string, srv Server, after ...func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("listening on http://%s\n", ln.Addr())
	slog.Info("serving", "program", what, "store", store, "addr", "http://"+ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	for _, f := range after {
		if err := f(sctx); err != nil {
			return err
		}
	}
	return nil
}
