package dlock

// SchedulerLooks returns how many passes over its leases the scheduler of
// l has made.
func SchedulerLooks(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sched.looks
}

// LeaseContexts returns how many contexts of [Lease.Context] ls still
// keeps.
func LeaseContexts(ls *Lease) int {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	return len(ls.ctxs)
}

// MaxRenewBatch is the most leases one renewal Extend call carries.
const MaxRenewBatch = maxRenewBatch
