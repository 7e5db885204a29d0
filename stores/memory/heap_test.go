package memstore

import (
	"math/rand/v2"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

// TestHeapInvariant runs random pushes, fixes and removals and checks the
// heap order and every entry's index after each.
func TestHeapInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	var h expiryHeap
	randTime := func() time.Time { return base.Add(time.Duration(r.IntN(1000)) * time.Second) }
	for step := range 5000 {
		switch op := r.IntN(3); {
		case op == 0 || len(h) == 0:
			h.push(&entry{Record: idem.Record{ExpiresAt: randTime()}})
		case op == 1:
			i := r.IntN(len(h))
			h[i].ExpiresAt = randTime()
			h.fix(i)
		default:
			e := h[r.IntN(len(h))]
			h.remove(e.index)
			if e.index != -1 {
				t.Fatalf("step %d: removed entry has index %d, want -1", step, e.index)
			}
		}
		for i, e := range h {
			if e.index != i {
				t.Fatalf("step %d: entry at %d has index %d", step, i, e.index)
			}
			if i > 0 && h.less(i, (i-1)/2) {
				t.Fatalf("step %d: entry at %d expires before its parent", step, i)
			}
		}
	}
}
