package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// Series is one labelled series of a range query: values at the query's
// steps, NaN where it had none.
type Series struct {
	Labels map[string]string
	Times  []time.Time
	Values []float64
}

// Source evaluates a PromQL expression over a time range.
type Source interface {
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error)
}

// Prometheus is a Source: the HTTP API of a Prometheus server, with the
// dashboard's variables ($name, ${name}) replaced by Vars first.
type Prometheus struct {
	URL  string
	Vars map[string]string
}

var variable = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// Expand replaces the variables of expr that vars names; others stay.
func Expand(expr string, vars map[string]string) string {
	return variable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

// QueryRange implements Source with GET /api/v1/query_range.
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	q := url.Values{
		"query": {Expand(expr, p.Vars)},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	ss, err := ParseMatrix(body)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", q.Get("query"), err)
	}
	return ss, nil
}

// ParseMatrix reads a query_range answer of the Prometheus HTTP API. An
// answer whose status is not "success" is an error carrying Prometheus's
// message.
func ParseMatrix(body []byte) ([]Series, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("not a Prometheus answer: %w", err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s %s", r.Status, r.Error)
	}
	if r.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("prometheus: a %q result, want a matrix", r.Data.ResultType)
	}
	out := make([]Series, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		s := Series{Labels: res.Metric}
		for _, v := range res.Values {
			ts, ok := v[0].(float64)
			str, ok2 := v[1].(string)
			if !ok || !ok2 {
				return nil, fmt.Errorf("prometheus: a sample %v is not [time, \"value\"]", v)
			}
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("prometheus: a sample value: %w", err)
			}
			sec, frac := math.Modf(ts)
			s.Times = append(s.Times, time.Unix(int64(sec), int64(frac*1e9)))
			s.Values = append(s.Values, f)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i].Labels) < fmt.Sprint(out[j].Labels) })
	return out, nil
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// Legend names a series by a Grafana legend format ("{{outcome}}"), or by
// its labels when the format is empty.
func Legend(format string, labels map[string]string) string {
	if format == "" {
		return fmt.Sprint(labels)
	}
	return legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
}
