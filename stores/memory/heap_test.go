package memstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// TestHeapInvariant runs random pushes, fixes and removals on both kinds
// of heap and checks the heap order and every entry's position after each.
func TestHeapInvariant(t *testing.T) {
	for _, byGone := range []bool{false, true} {
		r := rand.New(rand.NewPCG(1, 2))
		base := time.Now()
		h := expiryHeap{byGone: byGone}
		randTime := func() time.Time { return base.Add(time.Duration(r.IntN(1000)) * time.Second) }
		set := func(e *entry) {
			e.ExpiresAt = randTime()
			e.gone = randTime()
		}
		for step := range 5000 {
			switch op := r.IntN(3); {
			case op == 0 || len(h.es) == 0:
				e := &entry{Record: store.Record{}}
				set(e)
				h.push(e)
			case op == 1:
				e := h.es[r.IntN(len(h.es))]
				set(e)
				h.fix(e)
			default:
				e := h.es[r.IntN(len(h.es))]
				h.remove(e)
				if *h.pos(e) != -1 {
					t.Fatalf("byGone %t, step %d: removed entry has position %d, want -1", byGone, step, *h.pos(e))
				}
			}
			for i, e := range h.es {
				if *h.pos(e) != i {
					t.Fatalf("byGone %t, step %d: entry at %d has position %d", byGone, step, i, *h.pos(e))
				}
				if i > 0 && h.less(i, (i-1)/2) {
					t.Fatalf("byGone %t, step %d: entry at %d comes before its parent", byGone, step, i)
				}
			}
		}
	}
}
