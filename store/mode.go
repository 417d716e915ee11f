package store

// Mode names the pattern a [Request] belongs to. A store keeps the keys of
// each mode apart and implements every mode it supports atomically; a mode it
// cannot support makes it return an error wrapping [ErrNotSupported].
type Mode uint8

const (
	// ModeMutex is the exclusive lock: the plain key holds the holder's token.
	ModeMutex Mode = iota
	// ModeReentrant is an exclusive lock that the same Owner may take again.
	ModeReentrant
	// ModeRead is the shared side of a read-write lock.
	ModeRead
	// ModeWrite is the exclusive side of a read-write lock.
	ModeWrite
	// ModeFair is an exclusive lock granted in arrival order.
	ModeFair
	// ModeSemaphore is a lock with Limit shared holders.
	ModeSemaphore
	// ModeElection is a leader election: an exclusive hold of the name that
	// keeps the leader's Value beside it; the grant's fence is the term.
	// A store that supports it implements [Elector].
	ModeElection
)

var modeNames = [...]string{"mutex", "reentrant", "read", "write", "fair", "semaphore", "election"}

// String returns the lower-case name of m, as used in metrics and the HTTP API.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown"
}

// Shared reports whether holders of mode m may hold a name together with
// other holders of the same mode: readers, and semaphore permits (of one
// limit). Every other mode is exclusive.
func (m Mode) Shared() bool { return m == ModeRead || m == ModeSemaphore }

// ParseMode returns the Mode whose String is s.
func ParseMode(s string) (Mode, bool) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), true
		}
	}
	return 0, false
}

// Coexist is the rule that makes a name one lock, whatever pattern holds it:
// a request in mode asked may share the name with a hold in mode held only
// when both are the same shared mode (readers with readers, permits with
// permits of the same limit, which the store checks). Exclusive modes
// exclude every other holder of the name, of any mode; within its own mode
// a pattern adds its own rules (a reentrant owner re-enters, a waiting
// writer keeps new readers out, a fair queue goes in order).
func Coexist(held, asked Mode) bool { return held == asked && held.Shared() }
