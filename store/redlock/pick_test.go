package redlock

import "testing"

func TestPickFence(t *testing.T) {
	tests := []struct {
		fs     []int64
		q      int
		v      int64
		eq     int
		raises int
	}{
		{[]int64{5, 5, 5}, 2, 5, 3, 0},
		{[]int64{5, 5, 7}, 2, 5, 2, 0},
		{[]int64{1, 2, 3}, 2, 2, 1, 1},
		{[]int64{1, 2, 3}, 3, 3, 1, 2},
		{[]int64{9, 4, 4, 9, 9}, 3, 9, 3, 2},
		{[]int64{4, 4, 9}, 3, 9, 1, 2},
		{[]int64{7, 3, 3, 3}, 3, 3, 3, 0},
	}
	for _, tt := range tests {
		fs := append([]int64(nil), tt.fs...)
		v, eq := pickFence(fs, tt.q)
		raises := 0
		for _, f := range tt.fs {
			if f < v {
				raises++
			}
		}
		if v != tt.v || eq != tt.eq || raises != tt.raises {
			t.Errorf("pickFence(%v, %d) = %d, %d (%d raises), want %d, %d (%d raises)", tt.fs, tt.q, v, eq, raises, tt.v, tt.eq, tt.raises)
		}
		le := 0
		for _, f := range tt.fs {
			if f <= v {
				le++
			}
		}
		if le < tt.q {
			t.Errorf("pickFence(%v, %d) = %d: only %d fences at most it, want at least %d", tt.fs, tt.q, v, le, tt.q)
		}
	}
}
