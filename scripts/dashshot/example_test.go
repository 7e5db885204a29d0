package main

import "fmt"

// A panel's query as Prometheus receives it, its legend for one series,
// and a value in the panel's unit.
func Example() {
	expr := `sum by (outcome) (rate(idempotency_requests_total{job=~"$job", http_route=~"$route"}[$__rate_interval]))`
	fmt.Println(Expand(expr, map[string]string{"job": ".*", "route": ".*", "__rate_interval": "10s"}))
	fmt.Println(Legend("{{http_route}} {{outcome}}", map[string]string{"http_route": "/orders", "outcome": "conflict"}))
	fmt.Println(Format(0.371, "percentunit"), Format(0.0042, "s"))
	// Output:
	// sum by (outcome) (rate(idempotency_requests_total{job=~".*", http_route=~".*"}[10s]))
	// /orders conflict
	// 37.1% 4.2 ms
}
