// Command loadgen sends POST requests with Idempotency-Key headers to a
// server on this machine for a fixed time and reports throughput, status
// counts and latency, for comparing stores and frameworks:
//
//	go run ./examples/loadgen -url http://127.0.0.1:8080/orders -keys unique
//	go run ./examples/loadgen -url http://127.0.0.1:8080/orders -keys hot
//
// With -keys unique every request has a new key (every request runs the
// handler); with -keys hot they all share one (the first runs, the rest
// are replays); with -keys none no request has one (the baseline of a route
// whose key is optional). It refuses any host that is not loopback.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "http://127.0.0.1:8080/orders", "URL to POST to (loopback only)")
	body := flag.String("body", `{"item":"book","quantity":2}`, "request body")
	keys := flag.String("keys", "unique", "unique (a new key per request), hot (one key) or none (no key)")
	duration := flag.Duration("duration", 5*time.Second, "how long to send")
	workers := flag.Int("concurrency", 16, "requests in flight")
	flag.Parse()

	u, err := url.Parse(*target)
	if err != nil || (*keys != "unique" && *keys != "hot" && *keys != "none") || *workers < 1 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "usage: loadgen -url http://127.0.0.1:PORT/path [-keys unique|hot|none] [-duration 5s] [-concurrency 16]")
		os.Exit(2)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintln(os.Stderr, "loadgen only targets loopback addresses")
		os.Exit(2)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *workers}, Timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	var mu sync.Mutex
	codes := map[int]int{}
	var lat []time.Duration
	var errs int
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Go(func() {
			var mine []time.Duration
			mcodes := map[int]int{}
			merrs := 0
			for i := 0; ctx.Err() == nil; i++ {
				key := run + "-hot"
				if *keys == "unique" {
					key = run + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				}
				req, _ := http.NewRequest("POST", *target, bytes.NewReader([]byte(*body)))
				req.Header.Set("Content-Type", "application/json")
				if *keys != "none" {
					req.Header.Set("Idempotency-Key", key)
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
			}
			mu.Lock()
			lat = append(lat, mine...)
			for c, n := range mcodes {
				codes[c] += n
			}
			errs += merrs
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	fmt.Printf("requests %d in %v: %.0f req/s, p50 %v, p99 %v, errors %d, statuses %v\n",
		len(lat), elapsed.Round(time.Millisecond), float64(len(lat))/elapsed.Seconds(), pct(0.50), pct(0.99), errs, codes)
}
