package testredis

import (
	"strconv"
	"testing"
)

// TestCallgrindCountsInstructions: a server run WithCallgrind answers as
// any other, and Instructions counts what it executed since the last call:
// ten times the SETs, several times the instructions, and a count that does
// not carry over from one call to the next.
func TestCallgrindCountsInstructions(t *testing.T) {
	t.Parallel()
	s := Start(t, WithCallgrind())
	if _, err := s.Instructions(); err != nil { // the start
		t.Fatal(err)
	}
	count := func(n int) uint64 {
		t.Helper()
		for i := range n {
			if _, err := s.Do("SET", "k"+strconv.Itoa(i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		ins, err := s.Instructions()
		if err != nil {
			t.Fatal(err)
		}
		return ins
	}
	few, many := count(20), count(200)
	if few == 0 || many < 4*few {
		t.Errorf("instructions: %d for 20 SETs, %d for 200; want the second several times the first", few, many)
	}
	if _, err := Start(t).Instructions(); err == nil {
		t.Error("Instructions of a server started without WithCallgrind: no error")
	}
}
