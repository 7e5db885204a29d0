package main

import (
	"context"
	"encoding/json"
	"image"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"job": ".*", "__rate_interval": "10s"}
	for _, tc := range []struct{ in, want string }{
		{`rate(x{job=~"$job"}[$__rate_interval])`, `rate(x{job=~".*"}[10s])`},
		{`x{job=~"${job}"}`, `x{job=~".*"}`},
		{`x{route=~"$route"}`, `x{route=~"$route"}`}, // not given: left alone
		{`sum(x)`, `sum(x)`},
	} {
		if got := Expand(tc.in, vars); got != tc.want {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLegend(t *testing.T) {
	labels := map[string]string{"outcome": "replayed", "http_route": "/orders"}
	for _, tc := range []struct{ format, want string }{
		{"{{outcome}}", "replayed"},
		{"{{ http_route }} {{outcome}}", "/orders replayed"},
		{"p95 {{operation}}", "p95 "},
		{"replay rate", "replay rate"},
	} {
		if got := Legend(tc.format, labels); got != tc.want {
			t.Errorf("Legend(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{0.4213, "percentunit", "42.1%"},
		{1, "percentunit", "100%"},
		{812.4, "reqps", "812 req/s"},
		{1520, "ops", "1.52K ops/s"},
		{0.00042, "s", "420 us"},
		{0.0125, "s", "12.5 ms"},
		{2.5, "s", "2.5 s"},
		{0, "s", "0"},
		{3, "short", "3"},
		{2_500_000, "", "2.5M"},
	} {
		if got := Format(tc.v, tc.unit); got != tc.want {
			t.Errorf("Format(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

func TestParseMatrix(t *testing.T) {
	ss, err := ParseMatrix([]byte(`{"status":"success","data":{"resultType":"matrix","result":[
		{"metric":{"outcome":"executed"},"values":[[1700000000,"3.5"],[1700000005.5,"NaN"]]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].Labels["outcome"] != "executed" || len(ss[0].Values) != 2 ||
		ss[0].Values[0] != 3.5 || !math.IsNaN(ss[0].Values[1]) ||
		!ss[0].Times[1].Equal(time.Unix(1700000005, 5e8)) {
		t.Fatalf("ParseMatrix = %+v", ss)
	}
	for _, bad := range []string{
		`{"status":"error","error":"parse error at char 3"}`,
		`{"status":"success","data":{"resultType":"vector","result":[]}}`,
		`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[["x","1"]]}]}}`,
		`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"one"]]}]}}`,
		`<html>`,
	} {
		if _, err := ParseMatrix([]byte(bad)); err == nil {
			t.Errorf("ParseMatrix(%s) = nil error", bad)
		}
	}
}

func FuzzParseMatrix(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"values":[[1,"2"]]}]}}`))
	f.Add([]byte(`{"status":"error","error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := ParseMatrix(b)
		if err != nil {
			return
		}
		for _, s := range ss {
			if len(s.Times) != len(s.Values) {
				t.Fatalf("%d times, %d values", len(s.Times), len(s.Values))
			}
		}
	})
}

// canned is a Source that answers every query with the same two series,
// one rising and one flat, or with none for queries containing empty.
type canned struct{ queries []string }

func (f *canned) QueryRange(_ context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	f.queries = append(f.queries, expr)
	if strings.Contains(expr, "idempotency_wait_duration") {
		return nil, nil // as in a run without wait mode
	}
	var up, flat Series
	up.Labels = map[string]string{"outcome": "executed", "operation": "claim"}
	flat.Labels = map[string]string{"outcome": "replayed", "operation": "get"}
	for t := start; !t.After(end); t = t.Add(step) {
		x := t.Sub(start).Seconds()
		up.Times, up.Values = append(up.Times, t), append(up.Values, x)
		flat.Times, flat.Values = append(flat.Times, t), append(flat.Values, 0.25)
	}
	return []Series{up, flat}, nil
}

// TestRenderDashboard draws the real docs/dashboard.json: every panel is
// a kind dashshot draws, every target is queried, and the panels draw
// something inside their own rectangles.
func TestRenderDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../docs/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	src := &canned{}
	end := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	img, err := Render(context.Background(), d, src, end.Add(-2*time.Minute), end)
	if err != nil {
		t.Fatal(err)
	}
	targets := 0
	for _, p := range d.Panels {
		targets += len(p.Targets)
	}
	if len(src.queries) != targets || targets == 0 {
		t.Fatalf("%d queries for %d targets", len(src.queries), targets)
	}
	if got, want := img.Bounds().Dx(), 2*margin+24*colW; got != want {
		t.Errorf("width %d, want %d", got, want)
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		r := image.Rect(margin+p.GridPos.X*colW, header+p.GridPos.Y*unitH,
			margin+(p.GridPos.X+p.GridPos.W)*colW, header+(p.GridPos.Y+p.GridPos.H)*unitH).Inset(gap)
		if colours := distinct(img, r); colours < 3 { // background and title only
			t.Errorf("panel %q has %d colours: nothing drawn", p.Title, colours)
		}
	}
}

func TestRenderRefusesUnknownPanel(t *testing.T) {
	d := Dashboard{Panels: []Panel{{Type: "piechart", Title: "pie"}}}
	d.Panels[0].GridPos.W, d.Panels[0].GridPos.H = 6, 4
	_, err := Render(context.Background(), d, &canned{}, time.Unix(0, 0), time.Unix(60, 0))
	if err == nil || !strings.Contains(err.Error(), "piechart") {
		t.Fatalf("Render of a pie chart = %v, want an error naming it", err)
	}
}

func TestLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:9090", "http://localhost:8080/orders", "http://[::1]:1"} {
		if err := loopback(u); err != nil {
			t.Errorf("loopback(%q) = %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:9090", "http://example.com"} {
		if err := loopback(u); err == nil {
			t.Errorf("loopback(%q) = nil, want an error", u)
		}
	}
}

func distinct(img *image.RGBA, r image.Rectangle) int {
	seen := map[uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := img.RGBAAt(x, y)
			seen[uint32(c.R)<<16|uint32(c.G)<<8|uint32(c.B)] = true
		}
	}
	return len(seen)
}

// TestLine: every line ends at its end point, whichever way it runs (a
// line that overshot its end ran on for minutes).
func TestLine(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 40, 40))
	c := palette[0]
	for _, l := range [][4]int{{0, 0, 39, 39}, {39, 0, 0, 39}, {5, 30, 35, 2}, {20, 3, 21, 37}, {3, 20, 37, 21}, {7, 7, 7, 7}, {10, 5, 10, 30}, {2, 9, 30, 9}} {
		line(img, l[0], l[1], l[2], l[3], c)
		if img.RGBAAt(l[2], l[3]) != c || img.RGBAAt(l[0], l[1]) != c {
			t.Errorf("line %v misses an end", l)
		}
	}
}
