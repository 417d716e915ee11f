package redisproto

import (
	"context"
	"fmt"
)

// A Client is what a [Store] needs of a Redis client library, in the spirit
// of redsync's redis.Conn: the few calls the operations make. store/valkey
// adapts valkey-go to it, store/goredis go-redis; what is particular to a
// client (its connections, client-side caching, cluster routing, retries on
// a broken connection) stays behind it.
type Client interface {
	// Eval runs call by EVALSHA, and again by EVAL when the server answers
	// NOSCRIPT, and returns its reply.
	Eval(ctx context.Context, call Call) Reply
	// EvalMulti runs calls as Eval does, in one round trip (pipelined; one
	// per node of a cluster), and returns their replies in order.
	EvalMulti(ctx context.Context, calls []Call) []Reply
	// Scan calls fn with every key that matches the SCAN MATCH pattern on
	// every primary, one call at a time.
	Scan(ctx context.Context, match string, fn func(key string)) error
	// Publish sends msg on channel: by SPUBLISH, or by PUBLISH when legacy.
	Publish(ctx context.Context, channel string, msg []byte, legacy bool) error
	// Receive subscribes to channel (SSUBSCRIBE, or SUBSCRIBE when legacy),
	// calls ready once the server confirmed the subscription and onMessage
	// for every message, until ctx ends or the subscription fails. It
	// returns nil when the server ended the subscription, and an error
	// otherwise.
	Receive(ctx context.Context, channel string, legacy bool, ready func(), onMessage func(msg string)) error
	// Unsubscribe ends the subscription to channel on the server, if any.
	Unsubscribe(ctx context.Context, channel string, legacy bool)
	// Policies returns the maxmemory-policy of every primary (CONFIG GET).
	Policies(ctx context.Context) []NodePolicy
	// SameNode reports whether one node serves every one of keys, so that
	// one script can take them all: always off a cluster, when they share
	// a hash slot on one.
	SameNode(keys []string) bool
	// Ping sends PING (to one node of a cluster).
	Ping(ctx context.Context) error
	// ServerError returns the message of err when it is an error reply of
	// the server, not a failure to reach it.
	ServerError(err error) (msg string, ok bool)
	// Closed reports whether err means that the client was closed.
	Closed(err error) bool
}

// A Call is one script call: the script and its KEYS and ARGV, on lock
// Name.
type Call struct {
	Script     *Script
	Keys, Args []string
	Name       string
}

// A Tracker is a Client that can make a script call a tracked read: CLIENT
// CACHING YES ahead of it, in the same round trip, on a connection with
// CLIENT TRACKING ON ... OPTIN whose invalidations reach the Store's Hub. A
// waiter's refused acquire attempt then keeps the watch key tracked at no
// extra round trip (see [Hub]).
type Tracker interface {
	// EvalTracked runs call as Eval does, as a tracked read; tracked
	// reports whether the server took CLIENT CACHING YES.
	EvalTracked(ctx context.Context, call Call) (r Reply, tracked bool)
}

// A Confirmer is a Client that has the writes of script calls confirmed by
// replicas (WAIT) in the same round trip.
type Confirmer interface {
	// EvalConfirmed runs calls as EvalMulti does, each round trip followed by
	// WAIT, and returns their replies and, for each, nil or the error
	// saying that too few replicas confirmed its writes in time (naming
	// op, the operation, and the call's lock).
	EvalConfirmed(ctx context.Context, op string, calls []Call) ([]Reply, []error)
}

// NodePolicy is a node's maxmemory-policy, or the error of reading it.
type NodePolicy struct {
	Addr   string // address of the node
	Policy string // "" when the node did not say
	Err    error
}

// A Reply is what a script replied, as the Client read it: an error, or a
// value of one of the kinds scripts return (an integer, a string, an array
// of replies, nil). Make one with IntReply, StringReply, ArrayReply,
// NilReply or ErrorReply.
type Reply struct {
	err   error
	kind  replyKind
	n     int64
	s     string
	array []Reply
}

type replyKind uint8

const (
	nilReply replyKind = iota
	intReply
	stringReply
	arrayReply
)

// IntReply is an integer reply.
func IntReply(n int64) Reply { return Reply{kind: intReply, n: n} }

// StringReply is a string reply (simple or bulk).
func StringReply(s string) Reply { return Reply{kind: stringReply, s: s} }

// ArrayReply is an array reply.
func ArrayReply(a []Reply) Reply { return Reply{kind: arrayReply, array: a} }

// NilReply is a nil reply.
func NilReply() Reply { return Reply{} }

// ErrorReply is a failed call: an error reply of the server, or the
// client's failure to get one.
func ErrorReply(err error) Reply { return Reply{err: err} }

// Err returns the error of a failed call, or nil.
func (r Reply) Err() error { return r.err }

// Int64 returns an integer reply.
func (r Reply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.kind != intReply {
		return 0, r.want("an integer")
	}
	return r.n, nil
}

// Int64s returns an array reply of integers.
func (r Reply) Int64s() ([]int64, error) {
	a, err := r.Values()
	if err != nil {
		return nil, err
	}
	v := make([]int64, len(a))
	for i, e := range a {
		if e.kind != intReply {
			return nil, r.want("an array of integers")
		}
		v[i] = e.n
	}
	return v, nil
}

// Strings returns an array reply of strings.
func (r Reply) Strings() ([]string, error) {
	a, err := r.Values()
	if err != nil {
		return nil, err
	}
	v := make([]string, len(a))
	for i, e := range a {
		if e.kind != stringReply {
			return nil, r.want("an array of strings")
		}
		v[i] = e.s
	}
	return v, nil
}

// Values returns the elements of an array reply.
func (r Reply) Values() ([]Reply, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.kind != arrayReply {
		return nil, r.want("an array")
	}
	return r.array, nil
}

// Str returns a string reply, or "" for a reply of another kind.
func (r Reply) Str() string { return r.s }

func (r Reply) want(what string) error {
	return fmt.Errorf("dlock: script replied %s, want %s", r.describe(), what)
}

func (r Reply) describe() string {
	switch r.kind {
	case intReply:
		return fmt.Sprint(r.n)
	case stringReply:
		return fmt.Sprintf("%q", r.s)
	case arrayReply:
		return fmt.Sprintf("an array of %d", len(r.array))
	}
	return "nil"
}
