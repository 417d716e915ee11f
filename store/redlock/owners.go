package redlock

import (
	"cmp"
	"slices"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// ownerKey is what the nodes' records of one hold share: the holder and its
// data. The token, which would tell holds apart, is never shown, and each
// node records the grant time by its own clock and the fence it issued.
type ownerKey struct{ owner, data string }

// nodeOwners returns the holds a node's state describes: its Owners, and
// as many unknown holders again as it has holders beyond them.
func nodeOwners(st store.State) []store.Holder {
	hs := st.Owners
	for len(hs) < st.Holders {
		hs = append(hs, store.Holder{})
	}
	return hs
}

// combineOwners combines the nodes' holds (lists, one per node that
// answered) as a quorum of q sees them. Holds with the same holder and
// data count as one per node: there are as many of them as q nodes have
// at least (the q-th highest count over the nodes, a node without any
// counting none). Each one's Since is the q-th earliest of the nodes'
// (by then a quorum had granted it, by their clocks) and its Fence the
// highest (see combine for exclusive holds). With q = 1 it is every hold
// some node reports, its earliest Since.
func combineOwners(lists [][]store.Holder, q int) []store.Holder {
	byKey := make(map[ownerKey][][]store.Holder)
	var keys []ownerKey
	for n, hs := range lists {
		for _, h := range hs {
			k := ownerKey{h.Owner, h.Data}
			per, ok := byKey[k]
			if !ok {
				keys = append(keys, k)
				per = make([][]store.Holder, len(lists))
				byKey[k] = per
			}
			per[n] = append(per[n], h)
		}
	}
	var out []store.Holder
	for _, k := range keys {
		per := byKey[k]
		counts := make([]int, len(per))
		for n, hs := range per {
			counts[n] = len(hs)
			slices.SortFunc(hs, func(a, b store.Holder) int { return a.Since.Compare(b.Since) })
		}
		for j := range qthHighest(counts, q) {
			var since []time.Time
			h := store.Holder{Owner: k.owner, Data: k.data}
			for _, hs := range per {
				if j < len(hs) {
					since = append(since, hs[j].Since)
					h.Fence = max(h.Fence, hs[j].Fence)
				}
			}
			slices.SortFunc(since, func(a, b time.Time) int { return a.Compare(b) })
			h.Since = since[min(q, len(since))-1]
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Holder) int { return cmp.Compare(a.Owner, b.Owner) })
	return out
}
