package store

import (
	"errors"
	"testing"
	"time"
)

func TestRecordTakeable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		rec  Record
		want bool
	}{
		{"live claim", Record{State: InProgress, LeaseEnd: now.Add(time.Second), ExpiresAt: now.Add(time.Second)}, false},
		{"claim whose lease ends now", Record{State: InProgress, LeaseEnd: now, ExpiresAt: now.Add(time.Hour)}, true},
		{"claim past its lease", Record{State: InProgress, LeaseEnd: now.Add(-time.Nanosecond), ExpiresAt: now.Add(time.Hour)}, true},
		{"completed before expiry", Record{State: Completed, ExpiresAt: now.Add(time.Nanosecond)}, false},
		{"completed, expiring now", Record{State: Completed, ExpiresAt: now}, true},
		{"completed with a stale lease end", Record{State: Completed, LeaseEnd: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}, false},
	} {
		if got := tc.rec.Takeable(now); got != tc.want {
			t.Errorf("%s: Takeable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecordCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ok := []Record{
		{State: InProgress, LeaseEnd: now, ExpiresAt: now},
		{State: Completed, ExpiresAt: now, Result: Result{Head: []byte{1}}},
		{State: Completed, ExpiresAt: now, Result: Result{Head: []byte{9}, BodyOmitted: true}},
	}
	for _, r := range ok {
		if err := r.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", r, err)
		}
	}
	bad := map[string]Record{
		"state 0":                      {ExpiresAt: now},
		"state 3":                      {State: 3, ExpiresAt: now},
		"no expiry":                    {State: Completed, Result: Result{Head: []byte{1}}},
		"in progress, no lease end":    {State: InProgress, ExpiresAt: now},
		"completed without response":   {State: Completed, ExpiresAt: now},
		"completed with an empty head": {State: Completed, ExpiresAt: now, Result: Result{Head: []byte{}}},
	}
	for name, r := range bad {
		if err := r.Check(); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: Check = %v, want ErrCorruptRecord", name, err)
		}
	}
}
