// Command client sends orders to the orders API through a flaky network,
// with idemclient retrying them, and prints what happened to each:
//
//	go run ./examples/chi &
//	go run ./examples/client -target http://127.0.0.1:8080 -n 20 -drop 0.2
//
// It starts a fault proxy (examples/internal/flaky) on loopback in front of
// the target, which loses responses after the server handled the request
// (-drop), resets connections before forwarding (-reset) and holds
// requests (-delay, -delay-time), and sends -n orders (POST /orders)
// through it, -concurrency at a time. It prints one line per order (key
// prefix, attempts, whether the answer was a replay, the status and the
// time), a summary line "summary: N of N orders succeeded ...", and how
// many orders the server holds now against before (GET /orders, straight
// to the target): one per order however many attempts it took. With -v it
// also prints every attempt. It exits with status 1 when an order failed,
// and refuses any target that is not loopback.
//
// net/http's Transport itself resends a request with an Idempotency-Key
// once when a reused connection fails, within one attempt: an order can be
// a replay on its first attempt, and the proxy counts more requests than
// there were attempts.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	idemclient "github.com/idemkit/idem/client"
	"github.com/idemkit/idem/examples/internal/flaky"
)

type options struct {
	target      *url.URL
	n           int
	concurrency int
	attempts    int
	verbose     bool
	proxy       flaky.Config
}

func parse() options {
	var o options
	target := flag.String("target", "http://127.0.0.1:8080", "the orders API (go run ./examples/chi), loopback only")
	flag.IntVar(&o.n, "n", 20, "orders to send")
	flag.IntVar(&o.concurrency, "concurrency", 1, "orders in flight at once")
	flag.IntVar(&o.attempts, "attempts", idemclient.DefaultMaxAttempts, "attempts per order at most")
	flag.BoolVar(&o.verbose, "v", false, "print every attempt")
	flag.Float64Var(&o.proxy.Drop, "drop", 0.2, "probability that a response is lost after the server handled the request")
	flag.Float64Var(&o.proxy.Reset, "reset", 0.05, "probability that a connection is reset before the request is forwarded")
	flag.Float64Var(&o.proxy.Delay, "delay", 0.1, "probability that a request is held for -delay-time")
	flag.DurationVar(&o.proxy.DelayTime, "delay-time", 200*time.Millisecond, "how long a delayed request is held")
	flag.Uint64Var(&o.proxy.Seed, "seed", 1, "seed of the proxy's random faults")
	flag.Parse()
	u, err := url.Parse(*target)
	switch {
	case err != nil || u.Scheme != "http" || u.Host == "":
		usage("-target %q: want http://HOST:PORT", *target)
	case !loopback(u.Hostname()):
		usage("-target %q: only loopback targets are allowed", *target)
	case o.n < 1 || o.concurrency < 1 || o.attempts < 1 || flag.NArg() > 0:
		usage("-n, -concurrency and -attempts must be at least 1")
	}
	o.target = u
	o.proxy.Target = u.Host
	if u.Port() == "" {
		o.proxy.Target = net.JoinHostPort(u.Hostname(), "80")
	}
	return o
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "client: "+format+"\n", args...)
	flag.Usage()
	os.Exit(2)
}

// outcome is what happened to one order.
type outcome struct {
	n      int
	result idemclient.Result
	status int
	id     string
	err    error
	took   time.Duration
}

func main() {
	o := parse()
	proxy, err := flaky.New(o.proxy)
	if err != nil {
		usage("%v", err)
	}
	defer proxy.Close()

	direct := &http.Client{Timeout: 10 * time.Second}
	before, err := countOrders(direct, o.target.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "client: the target does not answer GET /orders:", err)
		os.Exit(1)
	}

	var printMu sync.Mutex
	hook := func(a idemclient.Attempt) {
		if !o.verbose {
			return
		}
		what := fmt.Sprint(a.Status)
		if a.Err != nil {
			what = a.Err.Error()
		}
		printMu.Lock()
		defer printMu.Unlock()
		if a.Retry {
			fmt.Printf("          key %.8s  attempt %d: %s; retry in %v\n", a.Key, a.Number, what, a.Wait.Round(time.Millisecond))
		} else {
			fmt.Printf("          key %.8s  attempt %d: %s\n", a.Key, a.Number, what)
		}
	}
	tr, err := idemclient.New(&http.Transport{MaxIdleConnsPerHost: o.concurrency},
		idemclient.WithMaxAttempts(o.attempts), idemclient.WithOnAttempt(hook))
	if err != nil {
		usage("%v", err)
	}
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}

	outcomes := make(chan outcome)
	orders := make(chan int)
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
			for i := range orders {
				outcomes <- send(client, proxy.URL(), i)
			}
		})
	}
	go func() {
		for i := 1; i <= o.n; i++ {
			orders <- i
		}
		close(orders)
		wg.Wait()
		close(outcomes)
	}()

	var ok, attempts, replays int
	var took []time.Duration
	for out := range outcomes {
		printMu.Lock()
		print(out)
		printMu.Unlock()
		attempts += out.result.Attempts
		if out.err == nil && out.status == http.StatusCreated {
			ok++
			took = append(took, out.took)
		}
		if out.result.Replayed {
			replays++
		}
	}
	slices.Sort(took)
	s := proxy.Stats()
	fmt.Printf("summary: %d of %d orders succeeded, %d failed; %d attempts, %d answered by a replay", ok, o.n, o.n-ok, attempts, replays)
	if len(took) > 0 {
		fmt.Printf("; time p50 %s, max %s", ms(took[len(took)/2]), ms(took[len(took)-1]))
	}
	fmt.Printf("\nproxy: %d requests; responses dropped %d, connections reset %d, requests delayed %d\n", s.Requests, s.Dropped, s.Reset, s.Delayed)
	if after, err := countOrders(direct, o.target.String()); err == nil {
		fmt.Printf("server: %d new orders for %d sent\n", after-before, o.n)
	}
	if ok < o.n {
		os.Exit(1)
	}
}

var items = []string{"book", "pen", "lamp", "mug", "chair"}

// send places order i through the proxy and reports what happened.
func send(client *http.Client, base string, i int) outcome {
	out := outcome{n: i}
	body := fmt.Sprintf(`{"item":%q,"quantity":%d}`, items[i%len(items)], i%3+1)
	began := time.Now()
	resp, err := client.Post(base+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		out.err, out.took = err, time.Since(began)
		if e, ok := errors.AsType[*idemclient.Error](err); ok {
			out.result = idemclient.Result{Key: e.Key, Attempts: e.Attempts}
		}
		return out
	}
	defer resp.Body.Close()
	var created struct{ ID string }
	b, err := io.ReadAll(resp.Body)
	out.took = time.Since(began)
	if err != nil {
		out.err = err
	}
	json.Unmarshal(b, &created)
	out.result, _ = idemclient.ResultOf(resp)
	out.status, out.id = resp.StatusCode, created.ID
	return out
}

func print(o outcome) {
	replay := "new"
	if o.result.Replayed {
		replay = "replayed"
	}
	if o.err != nil {
		fmt.Printf("order %3d  key %.8s  attempts %d  FAILED: %v  %s\n", o.n, o.result.Key, o.result.Attempts, o.err, ms(o.took))
		return
	}
	fmt.Printf("order %3d  key %.8s  attempts %d  %-8s  %d %-7s  %s\n", o.n, o.result.Key, o.result.Attempts, replay, o.status, o.id, ms(o.took))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// countOrders returns how many orders the server holds.
func countOrders(c *http.Client, base string) (int, error) {
	resp, err := c.Get(base + "/orders")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, fmt.Errorf("GET /orders: %d: %w", resp.StatusCode, err)
	}
	return len(list), nil
}
