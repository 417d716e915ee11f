package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fence"
	"github.com/dlock-dev/dlock/store/memory"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGuardRefusesLowerFences(t *testing.T) {
	var rejected int
	g := fence.Guard{OnReject: func() { rejected++ }}
	steps := []struct {
		fence int64
		ok    bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {1, false}, {8, true}}
	for _, s := range steps {
		err := g.Admit(s.fence)
		if (err == nil) != s.ok {
			t.Errorf("Admit(%d) = %v, want ok=%v", s.fence, err, s.ok)
		}
		var se *fence.StaleError
		if err != nil && (!errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Fence != s.fence) {
			t.Errorf("Admit(%d) error %v, want a StaleError for it", s.fence, err)
		}
	}
	if g.Highest() != 8 || g.Rejected() != 2 || rejected != 2 {
		t.Errorf("Highest, Rejected, hook = %d, %d, %d; want 8, 2, 2", g.Highest(), g.Rejected(), rejected)
	}
}

func TestGuardDoRecordsOnlySuccessfulWrites(t *testing.T) {
	var g fence.Guard
	boom := errors.New("disk full")
	if err := g.Do(9, func() error { return boom }); err != boom {
		t.Errorf("Do with failing write = %v, want %v", err, boom)
	}
	if g.Highest() != 0 {
		t.Errorf("Highest after a failed write = %d, want 0", g.Highest())
	}
}

func TestRegisterUnderConcurrentWriters(t *testing.T) {
	var r fence.Register[int64]
	var wg sync.WaitGroup
	for f := int64(1); f <= 200; f++ {
		wg.Go(func() { r.Write(f, f) })
	}
	wg.Wait()
	v, f := r.Read()
	if v != 200 || f != 200 {
		t.Errorf("Read() = %d, %d; want the highest write 200, 200", v, f)
	}
}

// A holder paused past its TTL comes back and writes: the register refuses
// it because the next holder has written with a higher fence.
func Example() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(100*time.Millisecond))
	defer locker.Close()
	var balance fence.Register[int]

	old, _ := locker.Mutex("account").TryLock(ctx)
	<-old.Done() // paused past its lease

	current, _ := locker.Mutex("account").Lock(ctx)
	fmt.Println(balance.Write(current.Fence(), 100))
	fmt.Println(errors.Is(balance.Write(old.Fence(), 50), fence.ErrStale))
	current.Release(ctx)
	// Output:
	// <nil>
	// true
}
