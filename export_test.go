package dlock

// SchedulerLooks returns how many passes over its leases the scheduler of
// l has made.
func SchedulerLooks(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sched.looks
}
