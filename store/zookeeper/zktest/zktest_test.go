package zktest_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

func TestStart(t *testing.T) {
	st := time.Now()
	s := zktest.Start(t)
	t.Logf("started %s (pid %d) in %v", s.Addr(), s.PID(), time.Since(st))
	st = time.Now()
	s.Restart(t)
	t.Logf("restarted in %v", time.Since(st))
}
