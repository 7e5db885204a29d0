package memstore

// expiryHeap is a min-heap of entries ordered by expiresAt. Each entry
// keeps its position in index, so an entry whose expiry changes is fixed,
// and a removed entry taken out, in O(log n). An entry is in at most one
// heap at a time.
type expiryHeap []*entry

// min returns the entry that expires first, or nil when the heap is empty.
func (h expiryHeap) min() *entry {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

func (h expiryHeap) less(i, j int) bool { return h[i].ExpiresAt.Before(h[j].ExpiresAt) }

func (h expiryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *expiryHeap) push(e *entry) {
	e.index = len(*h)
	*h = append(*h, e)
	h.up(e.index)
}

// remove takes the entry at position i out of the heap.
func (h *expiryHeap) remove(i int) {
	old := *h
	last := len(old) - 1
	if i != last {
		old.swap(i, last)
	}
	old[last].index = -1
	old[last] = nil
	*h = old[:last]
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap order after the entry at position i changed.
func (h expiryHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h expiryHeap) up(j int) {
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
func (h expiryHeap) down(i0 int) bool {
	i, n := i0, len(h)
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
