package valkey

import (
	"strings"

	"github.com/dlock-dev/dlock"
)

// key returns the main key of the lock name: the prefix followed by the name,
// exactly, so that a mutex held through dlock is the key that redsync,
// redislock, node-redlock and redis-py's Lock would set for the same name.
func (s *Store) key(name string) string { return s.prefix + name }

// aux returns the auxiliary key suffix of the lock name (its fence counter,
// queue, holder set and so on). It lives in the same Redis Cluster hash slot
// as the main key, so that every script of one lock touches one slot:
//
//   - main key without a hash tag, "lock:x": "{lock:x}:fence";
//   - main key with a hash tag, "lock:{user:1}:job": "{user:1}:lock:{user:1}:job:fence".
//
// The second form repeats the main key because a hash tag may be shared by
// many locks (all names "{user:1}:..." or a prefix such as "{locks}:"), and
// two locks must never share an auxiliary key. Auxiliary keys start with
// "{", so they never match the default prefix.
func (s *Store) aux(name, suffix string) string {
	return s.keySet(false, name, suffix)[0]
}

// keySet returns the auxiliary keys of lock name with the given suffixes
// (see aux), preceded by its main key when withMain is set. The keys are
// substrings of one string: two allocations however many keys.
func (s *Store) keySet(withMain bool, name string, suffixes ...string) []string {
	main := s.prefix + name // the main key, when withMain
	pre, post := "{", "}:"
	if tag, ok := hashTag(main); ok {
		// "{tag}:<main>:"
		pre, post = "{"+tag+"}:", ":"
	}
	// Every auxiliary key is pre + main + post + suffix.
	stem := len(pre) + len(main) + len(post)
	n := 0
	if withMain {
		n = len(main)
	}
	for _, sfx := range suffixes {
		n += stem + len(sfx)
	}
	var b strings.Builder
	b.Grow(n)
	if withMain {
		b.WriteString(main)
	}
	for _, sfx := range suffixes {
		b.WriteString(pre)
		b.WriteString(main)
		b.WriteString(post)
		b.WriteString(sfx)
	}
	all := b.String()
	keys := make([]string, 0, len(suffixes)+1)
	at := 0
	if withMain {
		keys = append(keys, all[:len(main)])
		at = len(main)
	}
	for _, sfx := range suffixes {
		end := at + stem + len(sfx)
		keys = append(keys, all[at:end])
		at = end
	}
	return keys
}

// hashTag returns the hash tag of key by the Redis Cluster rule: the bytes
// between the first "{" and the first "}" after it, when there are any.
func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// checkName validates name as dlock.ValidName does, and refuses a name
// whose main key contains "}" but no hash tag ("lock:a}b", "lock:{}x"): no
// auxiliary key could share such a key's cluster slot, since a hash tag
// cannot contain "}".
func (s *Store) checkName(name string) error {
	if err := dlock.ValidName(name); err != nil {
		return err
	}
	main := s.key(name)
	if _, ok := hashTag(main); !ok && strings.IndexByte(main, '}') >= 0 {
		return &dlock.InvalidError{Field: "name", Reason: `contains "}" outside a {hash tag}, so the lock's keys could not share a cluster slot`}
	}
	return nil
}
