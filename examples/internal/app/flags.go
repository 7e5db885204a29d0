package app

import (
	"flag"
	"fmt"
	"os"
)

// OrdersFlags are the flags every orders example takes: -addr,
// -log-level and the store flags.
type OrdersFlags struct {
	Addr  string
	Log   LogFlags
	Store StoreFlags
}

// ParseOrders parses the orders examples' flags from the command line,
// exiting with status 2 on a bad value.
func ParseOrders(name string, extra func(fs *flag.FlagSet)) OrdersFlags {
	var f OrdersFlags
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.StringVar(&f.Addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free one)")
	f.Log.Register(fs)
	f.Store.Register(fs, name)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() { ordersUsage(fs, name) }
	fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	if err := f.Store.Validate(); err != nil {
		Fatal(err, true)
	}
	f.Log.Install()
	return f
}

// ordersUsage prints what an orders example serves, how to try it, and
// its flags.
func ordersUsage(fs *flag.FlagSet, name string) {
	framework := map[string]string{"chi": "Chi", "gin": "Gin", "echo": "Echo v4", "echov5": "Echo v5", "nethttp": "net/http", "fiber": "Fiber"}[name]
	w := fs.Output()
	fmt.Fprintf(w, `%[1]s serves an orders API on %[2]s with idem's middleware: POST and
PATCH need an Idempotency-Key; a retry with the same key gets the stored
answer with Idempotent-Replayed: true, a reused key with another body 422.

Routes:
  POST /orders                  create an order {"item":"book","quantity":2}
  GET  /orders, /orders/{id}    read them (never keyed)
  POST /orders/{id}/payments    pay an order {"amount":19.99}

Try it:
  go run ./examples/%[1]s &
  curl -i -X POST localhost:8080/orders -H 'Idempotency-Key: k1' -d '{"item":"book","quantity":2}'
  (the same command again replays; each request logs one "idempotency" line)

Usage: %[1]s [flags]
`, name, framework)
	fs.PrintDefaults()
}
