// Package memsnap puts a store/memory Store back to an earlier state, as a
// restart from a snapshot (or a failover to a replica that lagged) does to a
// real store: the root package's simulation uses it to check that fences
// never repeat whatever the store lived through. It is internal so that the
// memory store's public API has no such call; store/memory sets the hooks.
package memsnap

// Take returns a copy of the state of a *memory.Store (its holds, queues,
// fences and mark), and Restore puts the store back to such a copy. Set by
// store/memory when it is linked in.
var (
	Take    func(s any) any
	Restore func(s any, snapshot any)
)
