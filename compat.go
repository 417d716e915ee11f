package dlock

import "github.com/dlock-dev/dlock/store"

// Temporary: the store API under its old names in package dlock, until every
// importer names package store instead (the scripted commit that follows
// this one). The commit after it deletes this file.

type (
	Store        = store.Store
	Grant        = store.Grant
	MultiStore   = store.MultiStore
	MultiGrant   = store.MultiGrant
	GrantWatcher = store.GrantWatcher
	FenceRaiser  = store.FenceRaiser
	Inspector    = store.Inspector
	State        = store.State
	LockDelayer  = store.LockDelayer
	Drifter      = store.Drifter
	Elector      = store.Elector
	Pinger       = store.Pinger
	Broadcaster  = store.Broadcaster
)

const MaxBroadcast = store.MaxBroadcast

func SupportsLockDelay(s Store) bool { return store.SupportsLockDelay(s) }

func Coexist(held, asked Mode) bool { return store.Coexist(held, asked) }
