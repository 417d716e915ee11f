package soak

import (
	"testing"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// TestCheckerReentry: a reentrant owner whose release the store did not
// confirm may re-enter its hold and get its fence again (CI saw it after a
// kill of the node); any other repeat of an exclusive fence is a violation.
func TestCheckerReentry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, next grantRec
		unreleased  bool
		violations  int64
	}{
		{"re-entry after an unconfirmed release", grantRec{who: "c1", kind: "reentrant"}, grantRec{who: "c1", kind: "reentrant"}, true, 0},
		{"re-entry after a confirmed release", grantRec{who: "c1", kind: "reentrant"}, grantRec{who: "c1", kind: "reentrant"}, false, 2},
		{"another owner", grantRec{who: "c1", kind: "reentrant"}, grantRec{who: "c2", kind: "reentrant"}, true, 2},
		{"a mutex of the same holder", grantRec{who: "c1", kind: "reentrant"}, grantRec{who: "c1", kind: "mutex"}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker()
			now := wire.Now()
			first, next := tc.first, tc.next
			first.invoke, first.ret, first.fence, first.excl = now-3, now-2, 7, true
			next.invoke, next.ret, next.fence, next.excl = now-1, now, 7, true
			c.granted("a", first)
			if tc.unreleased {
				c.unreleased("a", first.who, first.fence)
			}
			c.granted("a", next)
			if got := c.dups + c.order; got != tc.violations {
				t.Fatalf("violations %d (dups %d, order %d), want %d: %q", got, c.dups, c.order, tc.violations, c.samples)
			}
			if want := int64(1 - min(tc.violations, 1)); c.reentries != want {
				t.Fatalf("re-entries counted %d, want %d", c.reentries, want)
			}
		})
	}
}
