package redisstore

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClockOneMaster checks that on a Cluster every Now reads the clock
// of one master, the owner of the key prefix+"clock", so that every
// engine sharing the Store aligns with the same clock.
func TestClockOneMaster(t *testing.T) {
	client := startCluster(t)
	s := newTestStore(t, client)
	ctx := t.Context()
	const n = 20
	for range n {
		if _, err := s.Now(ctx); err != nil {
			t.Fatal(err)
		}
	}
	owner, err := client.MasterForKey(ctx, s.prefix+"clock")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`cmdstat_time:calls=(\d+)`)
	var mu sync.Mutex
	got := map[string]int{}
	err = client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		k := 0
		if m := calls.FindStringSubmatch(info); m != nil {
			k, _ = strconv.Atoi(m[1])
		}
		mu.Lock()
		got[c.Options().Addr] = k
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for addr, k := range got {
		if (addr == owner.Options().Addr) != (k >= n) || (addr != owner.Options().Addr && k != 0) {
			t.Fatalf("TIME calls per master %v; want %d or more on %s, the owner of %s, and none elsewhere", got, n, owner.Options().Addr, s.prefix+"clock")
		}
	}
	t.Logf("TIME calls per master: %v", got)
}
