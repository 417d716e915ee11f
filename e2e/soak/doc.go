// Package soak is dlock's soak test: mixed traffic of every lock kind on one
// Valkey node, from the library in this process, from worker processes and
// from HTTP clients of a `dlock serve` process, while a seeded fault
// injector pauses, kills and restarts clients and servers and delays links.
// It checks exclusion (on valid leases), fences and the fenced register as it
// goes, and at the end that every key but the fence keys, slot marks and audit streams is gone and
// that neither this process nor the server grew in goroutines, file
// descriptors or heap beyond stated bounds.
//
// The package has no API; TestSoak is the test. Without DLOCK_LONG it runs a
// short smoke version; see docs/soak.md for the long run and its figures.
package soak
