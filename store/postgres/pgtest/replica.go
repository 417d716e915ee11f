package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Rebuild makes s a fresh streaming standby of primary in place, as an
// operator rebuilds a failed primary after a failover: it kills s (by PID)
// if it runs, replaces its data directory with a pg_basebackup of primary
// (-R -X stream: asynchronous, hot standby) and starts it again on the same
// port. It fails tb when the backup or the start fails. The pair's ports
// stay the same, so a client's multi-host URL naming both keeps working with
// the roles swapped.
func (s *Server) Rebuild(tb testing.TB, primary *Server) {
	tb.Helper()
	s.Kill()
	data := filepath.Join(s.dir, "data")
	if err := os.RemoveAll(data); err != nil {
		tb.Fatalf("pgtest: rebuild: %v", err)
	}
	bb := command(s.cred, filepath.Join(s.bin, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	bb.Dir = s.dir
	if out, err := bb.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: rebuild: pg_basebackup: %v\n%s", err, out)
	}
	if err := s.proc.Restart(); err != nil {
		tb.Fatalf("pgtest: rebuild: start the standby: %v", err)
	}
}

// Promote promotes a standby with `pg_ctl promote -w`, which returns once
// the server has left recovery and accepts writes. (SELECT pg_promote() is
// the other way; a test may run either.)
func (s *Server) Promote() error {
	if !s.proc.Running() {
		return fmt.Errorf("pgtest: promote: the server on port %d is not running", s.port)
	}
	cmd := command(s.cred, filepath.Join(s.bin, "pg_ctl"), "promote", "-w", "-t", "60", "-D", filepath.Join(s.dir, "data"))
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: pg_ctl promote: %v\n%s", err, out)
	}
	return nil
}
