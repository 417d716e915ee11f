package redlock

import (
	"sync"
	"testing"
	"time"
)

// TestWorkersReuseIdleOnes: a worker that finished its job takes the next
// one (the send run makes to an idle worker) instead of a new goroutine.
func TestWorkersReuseIdleOnes(t *testing.T) {
	w := newWorkers(time.Minute)
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	for i := range 100 {
		// The worker is back waiting for a job soon after its last one.
		ran := make(chan struct{})
		for deadline := time.Now().Add(10 * time.Second); ; {
			select {
			case w.jobs <- func() { close(ran) }:
			default:
				if time.Now().After(deadline) {
					t.Fatalf("job %d: no idle worker 10 s after the last job", i)
				}
				time.Sleep(100 * time.Microsecond)
				continue
			}
			break
		}
		<-ran
	}
	if n := w.started.Load(); n != 1 {
		t.Errorf("workers started for 101 jobs run one at a time = %d, want 1", n)
	}
	w.stop()
}

// TestWorkersRunConcurrentJobsAtOnce: run never waits for a busy worker.
func TestWorkersRunConcurrentJobsAtOnce(t *testing.T) {
	w := newWorkers(time.Minute)
	const n = 20
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		w.run(func() {
			defer done.Done()
			started.Done()
			<-release // each job blocks until all n have started
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	if got := w.started.Load(); got != n {
		t.Errorf("workers started for %d blocked jobs = %d, want %d", n, got, n)
	}
	w.stop()
}

// TestWorkersEndIdleAndOnStop: idle workers end after their idle time, and
// stop ends the others.
func TestWorkersEndIdleAndOnStop(t *testing.T) {
	w := newWorkers(10 * time.Millisecond)
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	exited := make(chan struct{})
	go func() { w.wg.Wait(); close(exited) }()
	select {
	case <-exited: // the idle worker ended by itself
	case <-time.After(10 * time.Second):
		t.Fatal("an idle worker still runs 10 s after its idle time")
	}

	w = newWorkers(time.Hour)
	for range 5 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
	}
	w.stop() // returns only once every worker ended
	select {
	case w.jobs <- func() {}:
		t.Fatal("a worker took a job after stop")
	default:
	}
}
