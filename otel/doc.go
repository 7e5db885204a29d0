// Package idemotel reports what the idempotency engine does as
// OpenTelemetry metrics and span attributes. It depends only on the
// OpenTelemetry API (go.opentelemetry.io/otel, otel/metric, otel/trace);
// the application picks the SDK and the exporter.
//
//	inst, err := idemotel.New() // the global MeterProvider
//	if err != nil { ... }
//	engine, err := idem.New(store, inst.Options()...)
//
// # Metrics
//
// Five instruments, from the meter named ScopeName:
//
//   - idempotency.requests, a counter (unit {request}): one per request
//     with a method the middleware protects (POST and PATCH by default; other
//     methods pass through unseen), with the attributes outcome (the idem.Outcome:
//     executed, replayed, replayed_after_wait, released, conflict,
//     wait_timeout, fingerprint_mismatch, missing_key, invalid_key,
//     body_too_large, body_unreadable, store_failure, not_acceptable,
//     undecryptable, no_namespace, canceled, skipped), http.request.method and
//     http.route (the route template, absent when the engine had none).
//   - idempotency.store.duration, a histogram in seconds: one per store
//     call, with the attributes operation (claim, complete, release, get,
//     delete, extend, begin_tx, commit, rollback, evict, now) and error (a
//     bool).
//   - idempotency.wait.duration, a histogram in seconds: the time a request
//     waited for another with the same key in wait mode (idem.WithWait),
//     with the attributes of idempotency.requests.
//   - idempotency.background, a counter (unit {task}): one per background
//     task of the engine (idem.Outcome.Background: completed_late,
//     completion_lost, completion_expired, completion_dropped,
//     release_failed), with the attributes of idempotency.requests.
//   - idempotency.claims.lost, a counter (unit {claim}): one per store call
//     that returned idem.ErrLeaseLost, the claim no longer held because its
//     lease ended and another request took the key over (or the record
//     expired or was deleted), with the attribute operation. A lost
//     complete or commit means a retry will run the handler again.
//
// The histograms advise explicit bucket boundaries from 0.1 ms to 10 s
// (store) and from 5 ms to 60 s (wait); an SDK View can replace them.
// Measurements carry the request's context, so an SDK that keeps exemplars
// links them to the trace.
//
// # Traces
//
// The package starts no span. On the span already in the request's
// context (the server span of otelhttp, otelgin, otelecho, ...), when it
// is recording, it sets idempotency.outcome, and idempotency.key_hash when
// the request had a key (a hash, the same as in the engine's logs; the key
// itself is never recorded), and records the event's error, if any (a
// store failure, a failed completion). The engine must therefore run
// inside the tracing middleware, as it does when the tracing middleware is
// the outermost one.
//
// # Logs
//
// An engine has one Observer, and the Instrumentation's takes the place of
// the engine's default, which logs with log/slog. To keep the logs, the
// Instrumentation passes every event on to the observer of WithNext, which
// is idem.SlogObserver(nil) (slog.Default()) unless set:
//
//	inst, err := idemotel.New(idemotel.WithNext(idem.SlogObserver(logger)))
//
// # Prometheus
//
// Through the OpenTelemetry Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus, default translation
// strategy UnderscoreEscapingWithSuffixes), the names become:
//
//	idempotency_requests_total{outcome, http_request_method, http_route}
//	idempotency_store_duration_seconds_bucket{operation, error, le} (and _sum, _count)
//	idempotency_wait_duration_seconds_bucket{outcome, http_request_method, http_route, le}
//	idempotency_background_total{outcome, http_request_method, http_route}
//	idempotency_claims_lost_total{operation}
//
// docs/dashboard.json in the repository is a Grafana dashboard of these
// series and docs/alerts.yml a set of Prometheus alert rules; a test of
// this package checks that they name only series and labels the package
// exports.
//
// The replay rate, the share of requests answered from a stored response,
// is one ratio of one counter:
//
//	  sum(rate(idempotency_requests_total{outcome=~"replayed|replayed_after_wait"}[5m]))
//	/
//	  sum(rate(idempotency_requests_total{outcome!="skipped"}[5m]))
//
// (drop the outcome!="skipped" filter to divide by every request, or add
// "by (http_route)" to both sums for a rate per route). Other useful
// queries: store failures,
// sum(rate(idempotency_requests_total{outcome="store_failure"}[5m])); and
// the 99th percentile of claim latency,
// histogram_quantile(0.99, sum by (le) (rate(idempotency_store_duration_seconds_bucket{operation="claim"}[5m]))).
//
// # Cost
//
// The attribute set of each (outcome, method, route) is built once and
// cached (up to 1024 of them; past that they are built per request), and
// the set of each store operation once in New, so recording allocates
// nothing beyond what the SDK does.
package idemotel
