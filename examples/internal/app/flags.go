package app

import (
	"flag"
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
