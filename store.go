package dlock

import "github.com/dlock-dev/dlock/store"

// This file re-exports what a lock user shares with package store: the
// Request that [Locker.Acquire] takes and the Mode a [Lease] has. Both are
// aliases, so values pass between the two packages unchanged.

// Mode names the pattern a lock belongs to: what [Lease.Mode] returns and
// [LockedError.Held] reports. It is [store.Mode].
type Mode = store.Mode

// The modes, one per pattern; see [store.Mode].
const (
	ModeMutex     Mode = store.ModeMutex     // exclusive: Mutex, each name of a Multi
	ModeReentrant Mode = store.ModeReentrant // exclusive, re-entered by its owner: Reentrant
	ModeRead      Mode = store.ModeRead      // shared with other readers: RWMutex.RLock
	ModeWrite     Mode = store.ModeWrite     // exclusive: RWMutex.Lock
	ModeFair      Mode = store.ModeFair      // exclusive, in arrival order: Fair
	ModeSemaphore Mode = store.ModeSemaphore // shared by up to n holders: Semaphore
	ModeElection  Mode = store.ModeElection  // exclusive, with the leader's value: Election
)

// ParseMode returns the Mode whose String is s ("mutex", "read", ...).
func ParseMode(s string) (Mode, bool) { return store.ParseMode(s) }

// Request is one operation on one lock, as [Locker.Acquire] takes it and a
// store sees it. It is [store.Request].
type Request = store.Request

// ValidName reports whether name is a valid lock name: 1-256 bytes of
// valid UTF-8 without control characters. It returns nil or an
// [*InvalidError]. It is [store.ValidName].
func ValidName(name string) error { return store.ValidName(name) }
