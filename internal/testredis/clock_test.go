package testredis

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverTime returns the server's TIME.
func serverTime(t *testing.T, s *Server) time.Time {
	t.Helper()
	r, err := s.Do("TIME")
	if err != nil {
		t.Fatalf("Do(TIME) = %v", err)
	}
	f := strings.Fields(r)
	if len(f) != 2 {
		t.Fatalf("Do(TIME) = %q, want seconds and microseconds", r)
	}
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	us, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("Do(TIME) = %q", r)
	}
	return time.Unix(sec, us*1000)
}

// checkOffset checks that the server's TIME is the local wall clock plus
// want, within the time the TIME call took.
func checkOffset(t *testing.T, s *Server, want time.Duration) {
	t.Helper()
	before := time.Now().Round(0)
	got := serverTime(t, s)
	after := time.Now().Round(0)
	// TIME has microseconds; allow one for the rounding.
	if got.Before(before.Add(want-time.Microsecond)) || got.After(after.Add(want+time.Microsecond)) {
		t.Errorf("TIME = %v, want between %v and %v (local clock %+v)", got, before.Add(want), after.Add(want), want)
	}
}

// TestClockShim steps a server's wall clock: TIME moves by each step at
// once, a key with PX expires early after a step forward (and outlives its
// PX after a step back), and the offset persists across a restart.
func TestClockShim(t *testing.T) {
	t.Parallel()
	s := Start(t, WithClockShim())
	checkOffset(t, s, 0)

	s.StepClock(-time.Hour)
	checkOffset(t, s, -time.Hour)
	s.StepClock(-1500 * time.Millisecond)
	checkOffset(t, s, -time.Hour-1500*time.Millisecond)
	if got, want := s.ClockOffset(), -time.Hour-1500*time.Millisecond; got != want {
		t.Errorf("ClockOffset() = %v, want %v", got, want)
	}

	// A step forward past a key's PX expires it at once.
	if _, err := s.Do("SET", "k", "v", "PX", "10000"); err != nil {
		t.Fatalf("Do(SET PX) = %v", err)
	}
	if got, err := s.Do("EXISTS", "k"); err != nil || got != "1" {
		t.Fatalf("EXISTS k = %q, %v, want 1", got, err)
	}
	s.StepClock(11 * time.Second)
	if got, err := s.Do("EXISTS", "k"); err != nil || got != "0" {
		t.Errorf("EXISTS k after a step of 11 s past its PX 10000 = %q, %v, want 0", got, err)
	}

	// A step back keeps a key past its PX (in real time).
	if _, err := s.Do("SET", "k", "v", "PX", "5000"); err != nil {
		t.Fatalf("Do(SET PX) = %v", err)
	}
	s.StepClock(-time.Minute)
	if got, err := s.Do("PTTL", "k"); err != nil || mustAtoi(t, got) < 60_000 {
		t.Errorf("PTTL k after a step back of 1 min = %q, %v, want above 60000, past its PX 5000", got, err)
	}

	off := s.ClockOffset()
	s.Restart(t)
	checkOffset(t, s, off)
	s.StepClock(-off)
	checkOffset(t, s, 0)
}

// TestClockShimAbsent: a server started without the shim has the real clock.
func TestClockShimAbsent(t *testing.T) {
	t.Parallel()
	s := Start(t)
	checkOffset(t, s, 0)
	defer func() {
		if recover() == nil {
			t.Error("StepClock without WithClockShim did not panic")
		}
	}()
	s.StepClock(time.Second)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("Atoi(%q) = %v", s, err)
	}
	return n
}
