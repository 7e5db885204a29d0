package memstore

import "time"

// expiryHeap is a min-heap of entries ordered by their ExpiresAt, or, for
// the heap with byGone set, by when they may be removed (entry.gone). Each
// entry keeps its position in each kind of heap (entry.index,
// entry.gindex), so an entry whose time changes is fixed, and a removed
// entry taken out, in O(log n). An entry is in at most one heap of each
// kind at a time.
type expiryHeap struct {
	es     []*entry
	byGone bool
}

func (h *expiryHeap) at(e *entry) time.Time {
	if h.byGone {
		return e.gone
	}
	return e.ExpiresAt
}

func (h *expiryHeap) pos(e *entry) *int {
	if h.byGone {
		return &e.gindex
	}
	return &e.index
}

// min returns the entry that comes first, or nil when the heap is empty.
func (h *expiryHeap) min() *entry {
	if len(h.es) == 0 {
		return nil
	}
	return h.es[0]
}

func (h *expiryHeap) less(i, j int) bool { return h.at(h.es[i]).Before(h.at(h.es[j])) }

func (h *expiryHeap) swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	*h.pos(h.es[i]) = i
	*h.pos(h.es[j]) = j
}

func (h *expiryHeap) push(e *entry) {
	*h.pos(e) = len(h.es)
	h.es = append(h.es, e)
	h.up(len(h.es) - 1)
}

// remove takes e out of the heap.
func (h *expiryHeap) remove(e *entry) {
	i := *h.pos(e)
	last := len(h.es) - 1
	if i != last {
		h.swap(i, last)
	}
	*h.pos(h.es[last]) = -1
	h.es[last] = nil
	h.es = h.es[:last]
	if i != last {
		h.fixAt(i)
	}
}

// fix restores the heap order after e's time changed.
func (h *expiryHeap) fix(e *entry) { h.fixAt(*h.pos(e)) }

func (h *expiryHeap) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *expiryHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down moves the entry at position i0 towards the leaves and reports
// whether it moved.
func (h *expiryHeap) down(i0 int) bool {
	i, n := i0, len(h.es)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
