package redisproto

import (
	"strconv"
	"testing"
	"time"
)

// TestMillis: Millis rounds up to whole milliseconds, and its cache of
// recent durations never answers for another duration, however they
// alternate.
func TestMillis(t *testing.T) {
	ds := []time.Duration{0, -time.Second, time.Nanosecond, time.Millisecond, time.Millisecond + 1, 30 * time.Second, time.Minute, 90 * time.Second, 8 * time.Millisecond, 16 * time.Millisecond}
	for round := range 3 {
		for i := range ds {
			d := ds[(i*7+round)%len(ds)]
			want := "0"
			if d > 0 {
				want = strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
			}
			if got := Millis(d); got != want {
				t.Fatalf("round %d: Millis(%v) = %s, want %s", round, d, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { Millis(30 * time.Second) }); n != 0 {
		t.Errorf("Millis of a repeated duration allocates %v times; want 0", n)
	}
}
