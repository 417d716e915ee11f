package redisproto

import "testing"

// TestSlot checks Slot against the Redis Cluster specification's examples
// and its hash tag rule.
func TestSlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 % 16384}, // the spec's CRC16 check value
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
	} {
		if got := Slot(c.key); got != c.want {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	if !SameSlot([]string{"lock:{t}a", "lock:{t}b", "{t}"}) {
		t.Errorf("SameSlot of keys sharing the hash tag {t} = false")
	}
	if SameSlot([]string{"foo", "bar"}) {
		t.Errorf("SameSlot(foo, bar) = true")
	}
}
