package idemotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	idemotel "github.com/idemkit/idem/otel"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.yaml.in/yaml/v3"
)

// The dashboard and the alert rules, relative to this package.
const (
	dashboardFile = "../docs/dashboard.json"
	alertsFile    = "../docs/alerts.yml"
)

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = []string{"job", "instance"}

// exported runs every instrument of the package through the
// OpenTelemetry Prometheus exporter, with its default settings, and
// returns the series names the registry serves (a histogram's _bucket,
// _sum and _count) with their label names.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	inst, err := idemotel.New(idemotel.WithMeterProvider(mp), idemotel.WithNext(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	observe, observeStore := inst.Observer(), inst.StoreObserver()
	observe(ctx, idem.Event{Outcome: idem.OutcomeExecuted, Method: "POST", Route: "/orders"})
	observe(ctx, idem.Event{Outcome: idem.OutcomeReplayedAfterWait, Method: "POST", Route: "/orders", Waited: time.Second})
	observe(ctx, idem.Event{Outcome: idem.OutcomeCompletionLost, Method: "POST", Route: "/orders"})
	observeStore(ctx, idem.StoreClaim, time.Millisecond, nil)
	observeStore(ctx, idem.StoreComplete, time.Millisecond, fmt.Errorf("store: %w", idem.ErrLeaseLost))

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]string{}
	for _, mf := range families {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		name := mf.GetName()
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			series[name+"_bucket"] = append(slices.Clone(labels), "le")
			series[name+"_sum"] = labels
			series[name+"_count"] = labels
			continue
		}
		series[name] = labels
	}
	return series
}

// The exporter's names of the package's instruments, as the docs,
// the dashboard and the alerts spell them.
func TestExportedNames(t *testing.T) {
	series := exported(t)
	for name, labels := range map[string][]string{
		"idempotency_requests_total":                {"outcome", "http_request_method", "http_route"},
		"idempotency_background_total":              {"outcome", "http_request_method", "http_route"},
		"idempotency_claims_lost_total":             {"operation"},
		"idempotency_store_duration_seconds_bucket": {"operation", "error", "le"},
		"idempotency_store_duration_seconds_count":  {"operation", "error"},
		"idempotency_wait_duration_seconds_bucket":  {"outcome", "http_request_method", "http_route", "le"},
	} {
		got, ok := series[name]
		if !ok {
			t.Errorf("the exporter serves no %s; it serves %v", name, sortedKeys(series))
			continue
		}
		for _, l := range labels {
			if !slices.Contains(got, l) {
				t.Errorf("%s has no label %s; it has %v", name, l, got)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// grafanaDashboard is the part of a Grafana dashboard the checks read.
type grafanaDashboard struct {
	Title      string         `json:"title"`
	UID        string         `json:"uid"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *grafanaDatasource `json:"datasource"`
	Targets    []struct {
		Expr         string             `json:"expr"`
		LegendFormat string             `json:"legendFormat"`
		Datasource   *grafanaDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

type grafanaVariable struct {
	Name       string             `json:"name"`
	Type       string             `json:"type"`
	Query      json.RawMessage    `json:"query"` // a string, or {"query": string}
	Datasource *grafanaDatasource `json:"datasource"`
}

// query returns the variable's query text.
func (v grafanaVariable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var q struct{ Query string }
	_ = json.Unmarshal(v.Query, &q)
	return q.Query
}

// alertRules is a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// labelValues matches Grafana's label_values(selector, label) query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// TestDashboard checks that docs/dashboard.json queries only series and
// labels the package exports, through a Prometheus data source variable,
// and that it has the panels the docs describe.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	c := &exprChecker{t: t, series: exported(t), used: map[string]bool{}}
	dsVar := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			dsVar = dsVar || v.Name == "datasource" && v.query() == "prometheus"
		case "query":
			checkDatasource(t, "variable "+v.Name, v.Datasource)
			m := labelValues.FindStringSubmatch(v.query())
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.query())
				continue
			}
			c.check("variable "+v.Name, m[1], "{{"+m[2]+"}}")
		}
	}
	if !dsVar {
		t.Error(`no "datasource" variable of type datasource for Prometheus`)
	}
	var titles []string
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			titles = append(titles, p.Title)
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			checkDatasource(t, "panel "+p.Title, p.Datasource)
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for i, tg := range p.Targets {
				where := fmt.Sprintf("panel %q query %d", p.Title, i)
				checkDatasource(t, where, tg.Datasource)
				c.check(where, tg.Expr, tg.LegendFormat)
			}
		}
	}
	walk(d.Panels)
	for _, want := range []string{"Replay rate", "Conflicts (409)", "Fingerprint mismatches (422)", "Store failures",
		"Store latency", "Background completions lost", "Claims lost (leases taken over)"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q; the panels are %q", want, titles)
		}
	}
	checkUsed(t, dashboardFile, c.used)
}

// checkDatasource reports a query that does not go to the dashboard's
// data source variable.
func checkDatasource(t *testing.T, where string, ds *grafanaDatasource) {
	t.Helper()
	if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: data source %+v, want prometheus ${datasource}", where, ds)
	}
}

// checkUsed reports a metric of the package that file never queries.
func checkUsed(t *testing.T, file string, used map[string]bool) {
	t.Helper()
	for _, m := range []string{"idempotency_requests_total", "idempotency_background_total",
		"idempotency_claims_lost_total", "idempotency_store_duration_seconds_bucket"} {
		if !used[m] {
			t.Errorf("%s never queries %s", file, m)
		}
	}
}

// TestAlerts checks that docs/alerts.yml queries only series and labels
// the package exports, and that every rule waits (for:) and says what to
// do.
func TestAlerts(t *testing.T) {
	f, err := os.Open(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var rules alertRules
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	c := &exprChecker{t: t, series: exported(t), used: map[string]bool{}}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			where := fmt.Sprintf("group %s alert %q", g.Name, r.Alert)
			if r.Alert == "" {
				t.Errorf("%s: rule %d has no name", where, n)
			}
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for: %q, want a duration", where, r.For)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", where)
			}
			var templates []string
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
				templates = append(templates, r.Annotations[a])
			}
			c.check(where, r.Expr, strings.Join(templates, "\n"))
		}
	}
	if n == 0 {
		t.Fatalf("%s has no rules", alertsFile)
	}
	checkUsed(t, alertsFile, c.used)
}
