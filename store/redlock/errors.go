package redlock

import (
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock/store"
)

// QuorumError reports that too few nodes answered for an operation to reach
// a majority. It wraps [store.ErrNoQuorum] (and so [store.ErrUnavailable])
// and every node's failure, each a [*store.StoreError] whose Node is the
// node's index in the slice given to New.
type QuorumError struct {
	Op     string  // acquire, extend, release, fence, ping
	OK     int     // nodes that answered as needed
	Quorum int     // nodes needed
	Nodes  []error // failures of single nodes
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dlock: no quorum for %s (%d nodes ok, %d needed)", e.Op, e.OK, e.Quorum)
	for i, err := range e.Nodes {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

// Unwrap returns [store.ErrNoQuorum] followed by the node failures.
func (e *QuorumError) Unwrap() []error {
	return append([]error{store.ErrNoQuorum}, e.Nodes...)
}
