package valkey

// The key layout is redisproto.Layout's; these name it for the Store.

// key returns the main key of the lock name (see redisproto.Layout.Key).
func (s *Store) key(name string) string { return s.l.Key(name) }

// aux returns an auxiliary key of the lock name (see redisproto.Layout.Aux).
func (s *Store) aux(name, suffix string) string { return s.l.Aux(name, suffix) }

// keySet returns auxiliary keys of lock name, preceded by its main key when
// withMain is set (see redisproto.Layout.KeySet).
func (s *Store) keySet(withMain bool, name string, suffixes ...string) []string {
	return s.l.KeySet(withMain, name, suffixes...)
}

// checkName validates name (see redisproto.Layout.CheckName).
func (s *Store) checkName(name string) error { return s.l.CheckName(name) }
