// Command loadgen sends POST requests with Idempotency-Key headers to a
// server on this machine for a fixed time and reports throughput, status
// counts and latency, for comparing stores and frameworks:
//
//	go run ./examples/loadgen -url http://127.0.0.1:8080/orders -keys unique
//	go run ./examples/loadgen -url http://127.0.0.1:8080/orders -keys hot
//
// With -keys unique every request has a new key (every request runs the
// handler); with -keys hot they all share one (the first runs, the rest
// are replays); with -keys replay80 four requests in five repeat, with the
// same body, a key the same worker already sent and got a 2xx answer for
// (one of the first 64 such keys), and the fifth has a new key; with
// -keys none no request has one (the baseline of a route whose key is
// optional). A repeated key carries the header Loadgen-Replay: true,
// which only the fixture's -floor server reads. It refuses any host that
// is not loopback.
//
// With -compare it measures several servers side by side on a shared,
// noisy machine: it runs each URL for -duration in turn, -rounds times,
// and prints each round's throughput and the median over rounds of each
// URL's throughput divided by the first URL's in the same round:
//
//	go run ./examples/loadgen -compare http://127.0.0.1:8081/orders,http://127.0.0.1:8082/orders -rounds 5
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/examples/internal/loadhdr"
)

type config struct {
	body     []byte
	keys     string
	duration time.Duration
	workers  int
}

func main() {
	target := flag.String("url", "http://127.0.0.1:8080/orders", "URL to POST to (loopback only)")
	compare := flag.String("compare", "", "comma-separated URLs to measure in turn, -rounds times, reporting each one's throughput relative to the first (loopback only)")
	rounds := flag.Int("rounds", 3, "with -compare: how many times each URL is measured")
	body := flag.String("body", `{"item":"book","quantity":2}`, "request body")
	keys := flag.String("keys", "unique", "unique (a new key per request), replay80 (four in five repeat a key already answered), hot (one key) or none (no key)")
	duration := flag.Duration("duration", 5*time.Second, "how long to send (to each URL, each round, with -compare)")
	workers := flag.Int("concurrency", 16, "requests in flight")
	flag.Parse()

	cfg := config{body: []byte(*body), keys: *keys, duration: *duration, workers: *workers}
	urls := []string{*target}
	if *compare != "" {
		urls = strings.Split(*compare, ",")
	}
	if err := check(cfg, urls, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		fmt.Fprintln(os.Stderr, "usage: loadgen -url http://127.0.0.1:PORT/path [-keys unique|replay80|hot|none] [-duration 5s] [-concurrency 16]")
		fmt.Fprintln(os.Stderr, "       loadgen -compare URL,URL[,...] [-rounds 3] [same flags]")
		os.Exit(2)
	}
	if *compare == "" {
		fmt.Println(run(urls[0], cfg))
		return
	}
	tput := make([][]float64, len(urls)) // [url][round]
	for r := range *rounds {
		for i, u := range urls {
			res := run(u, cfg)
			fmt.Printf("round %d %s: %s\n", r+1, u, res)
			tput[i] = append(tput[i], res.perSecond())
		}
	}
	for i, u := range urls {
		ratios := make([]float64, *rounds)
		for r := range ratios {
			ratios[r] = tput[i][r] / tput[0][r]
		}
		fmt.Printf("median %s: %.0f req/s, %.2f× the first (rounds %s)\n", u, median(tput[i]), median(ratios), fmtRatios(ratios))
	}
}

// check returns what is wrong with the flags, or nil.
func check(cfg config, urls []string, rounds int) error {
	switch {
	case !slices.Contains([]string{"unique", "replay80", "hot", "none"}, cfg.keys):
		return fmt.Errorf("-keys %q: want unique, replay80, hot or none", cfg.keys)
	case cfg.workers < 1 || cfg.duration <= 0 || rounds < 1:
		return fmt.Errorf("-concurrency, -duration and -rounds must be positive")
	}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%q is not a URL", s)
		}
		if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%s: loadgen only targets loopback addresses", s)
		}
	}
	return nil
}

// result is what one run measured.
type result struct {
	elapsed time.Duration
	lat     []time.Duration // sorted
	errs    int
	codes   map[int]int
}

func (r result) perSecond() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

func (r result) String() string {
	pct := func(p float64) time.Duration {
		if len(r.lat) == 0 {
			return 0
		}
		return r.lat[min(len(r.lat)-1, int(float64(len(r.lat))*p))]
	}
	return fmt.Sprintf("requests %d in %v: %.0f req/s, p50 %v, p99 %v, errors %d, statuses %v",
		len(r.lat), r.elapsed.Round(time.Millisecond), r.perSecond(), pct(0.50), pct(0.99), r.errs, r.codes)
}

// run sends requests to target from cfg.workers goroutines for
// cfg.duration.
func run(target string, cfg config) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.workers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	var mu sync.Mutex
	res := result{codes: map[int]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < cfg.workers; w++ {
		wg.Go(func() {
			var mine []time.Duration
			mcodes := map[int]int{}
			merrs := 0
			var sent []string // keys answered, for -keys replay80
			for i := 0; ctx.Err() == nil; i++ {
				key, replay := run+"-hot", false
				switch {
				case cfg.keys == "replay80" && len(sent) > 0 && rand.IntN(5) != 0:
					key, replay = sent[rand.IntN(len(sent))], true
				case cfg.keys == "unique" || cfg.keys == "replay80":
					key = run + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				}
				req, _ := http.NewRequest("POST", target, bytes.NewReader(cfg.body))
				req.Header.Set("Content-Type", "application/json")
				if cfg.keys != "none" {
					req.Header.Set("Idempotency-Key", key)
				}
				if replay {
					req.Header.Set(loadhdr.Replay, "true")
				}
				t := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					merrs++
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t))
				mcodes[resp.StatusCode]++
				if !replay && resp.StatusCode < 300 && len(sent) < 64 {
					sent = append(sent, key)
				}
			}
			mu.Lock()
			res.lat = append(res.lat, mine...)
			for c, n := range mcodes {
				res.codes[c] += n
			}
			res.errs += merrs
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.lat)
	return res
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}
