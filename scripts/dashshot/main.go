// Command dashshot draws docs/dashboard.json as a PNG from a real run: it
// sends a mix of requests to an idem-protected route (new keys, retries
// that replay, retries with another body, duplicates sent together), then
// asks a real Prometheus, which scraped the server's /metrics meanwhile,
// for every panel's queries exactly as the dashboard writes them (its
// variables set to match everything), and lays the panels out by their
// gridPos. scripts/dashboard-shot starts the server and Prometheus and
// runs it:
//
//	dashshot -drive http://127.0.0.1:8080/orders -duration 2m \
//	    -prometheus http://127.0.0.1:9090 -o docs/dashboard.png
//
// It draws lines, a legend and axes in the dark theme's colours; it is
// not Grafana, but every number on it is what the dashboard's queries
// return. It refuses any address that is not loopback.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"net"
	"net/url"
	"os"
	"time"
)

func main() {
	dashboard := flag.String("dashboard", "docs/dashboard.json", "the Grafana dashboard to draw")
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "the Prometheus that scrapes the server (loopback only)")
	drive := flag.String("drive", "", "POST a mix of keyed requests to this URL first (loopback only; default: send nothing)")
	duration := flag.Duration("duration", 2*time.Minute, "how long to send requests")
	window := flag.Duration("window", 2*time.Minute, "the time range drawn: the last, ending now or with the last request sent")
	rate := flag.Duration("rate-interval", 10*time.Second, "the value of $__rate_interval (at least 4 scrape intervals)")
	out := flag.String("o", "docs/dashboard.png", "the PNG to write")
	flag.Parse()
	for _, u := range []string{*prom, *drive} {
		if u == "" {
			continue // no -drive
		}
		if err := loopback(u); err != nil {
			fail(err)
		}
	}
	raw, err := os.ReadFile(*dashboard)
	if err != nil {
		fail(err)
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		fail(fmt.Errorf("%s: %w", *dashboard, err))
	}

	ctx := context.Background()
	end := time.Now()
	start := end.Add(-*window)
	if *drive != "" {
		began := time.Now()
		n, err := Drive(ctx, *drive, *duration)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "dashshot: sent %d requests\n", n)
		// Draw the traffic, not its ramps: from the first full rate
		// window to the last request, once Prometheus scraped past it.
		end = time.Now()
		start = began.Add(*rate)
		if w := end.Add(-*window); w.After(start) {
			start = w
		}
		time.Sleep(5 * time.Second)
	}
	src := &Prometheus{URL: *prom, Vars: map[string]string{
		"job": ".*", "route": ".*", "__rate_interval": (*rate).String(),
	}}
	img, err := Render(ctx, d, src, start, end)
	if err != nil {
		fail(err)
	}
	f, err := os.Create(*out)
	if err != nil {
		fail(err)
	}
	if err := errors.Join(png.Encode(f, img), f.Close()); err != nil {
		fail(err)
	}
}

// loopback refuses a URL whose host is not a loopback address.
func loopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s: dashshot only talks to loopback addresses", raw)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "dashshot:", err)
	os.Exit(1)
}
