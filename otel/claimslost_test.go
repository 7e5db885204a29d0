package idemotel_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	idemotel "github.com/idemkit/idem/otel"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// completeFails is a store whose Complete returns err, as a store does
// when the claim was taken over (idem.ErrLeaseLost, wrapped) or is down.
type completeFails struct {
	idem.Store
	err error
}

func (s completeFails) Complete(context.Context, store.Hold, store.Completion) error {
	return s.err
}

// TestClaimsLost counts a store call that found its claim lost in
// MetricClaimsLost, by operation, and no other store error.
func TestClaimsLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want map[string]int64
	}{
		{"lease lost", fmt.Errorf("store: %w", idem.ErrLeaseLost), map[string]int64{"complete": 1}},
		{"store down", errDown, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, func(s idem.Store) idem.Store { return completeFails{s, tc.err} },
					idem.WithCompletionRetry(0))
				r.do(http.MethodPost, "/echo", "k", "x", 201)
				synctest.Wait()
				got := claimsLost(t, r.collect())
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("%s %v, want %v", idemotel.MetricClaimsLost, got, tc.want)
				}
			})
		})
	}
}

// claimsLost returns MetricClaimsLost's values by operation.
func claimsLost(t *testing.T, rm metricdata.ResourceMetrics) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	m, ok := find(rm, idemotel.MetricClaimsLost)
	if !ok {
		return got
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic || m.Unit != "{claim}" {
		t.Fatalf("%s: %+v", idemotel.MetricClaimsLost, m)
	}
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Len() != 1 {
			t.Errorf("%s attributes %v, want operation only", idemotel.MetricClaimsLost, dp.Attributes.ToSlice())
		}
		got[str(dp.Attributes, idemotel.AttrOperation)] += dp.Value
	}
	return got
}
