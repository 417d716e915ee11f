package redisproto

import (
	"crypto/sha1" //nolint:gosec // G505: a name for a library's content, not a security hash
	"encoding/hex"
	"regexp"
	"strings"
	"sync/atomic"
)

// Redis 7 functions. A script run by EVALSHA runs its whole source on
// every call: each function it defines (clock_lib's issue, keep, ...) is
// made anew, and dropped for the collector, every time. The same source
// loaded as a function library (FUNCTION LOAD) runs its libraries once, at
// load, and each call (FCALL) runs the operation alone: the mutex's
// fast-path acquire and short release so cost the server about 8 % fewer
// instructions per new-name acquire and release (BenchmarkServerInstructions,
// docs/benchmarks.md). The hot scripts have a function form (see
// [Script.Function]); a store sends them by FCALL, loads the library where
// a server answers "Function not found" (first use, a restart that lost
// it, FUNCTION FLUSH) and calls again, and sends every call by EVALSHA
// when the server has no functions (before 7.0, or a proxy without FCALL)
// or will not load one (an ACL without FUNCTION).

// A Function is the function form of a [Script]: the library that defines
// it (FUNCTION LOAD's argument) and the function's name (FCALL's).
//
// The name carries a digest of the library's source: function and library
// names are global on a server, so every version of a script has names of
// its own, and a server shared by dlock versions keeps one library per
// version it has run (a few KB each; FUNCTION FLUSH, or FUNCTION DELETE
// of a "dlock_" library no running version uses, drops them).
type Function struct {
	Name string // the library's and its one function's name: "dlock_" and 24 hex digits
	Lib  string // the library's source, "#!lua name=<Name>" first
}

// functionForm is what makes a Script's function form: the length of the
// operation at the end of Src (what runs on each call; the rest of Src, its
// libraries, runs once at load), and the function's flags.
type functionForm struct {
	body  int
	flags string // Lua list items, e.g. "'allow-oom'"

	made atomic.Pointer[madeFunction] // the form, for the SHA it was made for
}

// madeFunction is a function form and the Script.SHA it was made for.
type madeFunction struct {
	sha string
	fn  *Function
}

// asFunction gives s a function form: the last body bytes of s.Src are the
// operation, the rest its libraries; flags are the function's flags as Lua
// list items ("" for none: a write function, refused by a server out of
// memory before it runs). It returns s.
func (s *Script) asFunction(body int, flags string) *Script {
	s.fn = &functionForm{body: body, flags: flags}
	return s
}

// Function returns the function form of s, or nil when s has none. It is
// made from s.Src when first asked for, and again after s.Src and s.SHA
// were changed (the fault suite's control swaps clock_lib into the
// scripts' sources): the libraries are s.Src but its last body bytes, so a
// change to the libraries keeps the operation.
func (s *Script) Function() *Function {
	form := s.fn
	if form == nil {
		return nil
	}
	if m := form.made.Load(); m != nil && m.sha == s.SHA {
		return m.fn
	}
	fn := makeFunction(s.Src[:len(s.Src)-form.body], s.Src[len(s.Src)-form.body:], form.flags)
	form.made.Store(&madeFunction{sha: s.SHA, fn: fn})
	return fn
}

// libState matches a library's top-level declarations of variables with no
// value ("local now_ms, phi"): state of one call, which a script starts
// without and a library keeps between calls, so the function form sets
// them back to nil first.
var libState = regexp.MustCompile(`(?m)^local ([A-Za-z_][A-Za-z0-9_]*(?:, *[A-Za-z_][A-Za-z0-9_]*)*)[ \t]*(?:--.*)?$`)

// makeFunction returns the function made of libs, run once when the
// library loads, and body, the operation, run by each call with KEYS and
// ARGV as its arguments (the names a script reads them by).
func makeFunction(libs, body, flags string) *Function {
	var reset string
	for _, m := range libState.FindAllStringSubmatch(libs, -1) {
		for v := range strings.SplitSeq(m[1], ",") {
			reset += strings.TrimSpace(v) + " = nil\n"
		}
	}
	const name = "@@name@@"
	src := libs + "\nredis.register_function{function_name = '" + name + "', flags = {" + flags + "}, callback = function(KEYS, ARGV)\n" +
		reset + body + "\nend}\n"
	sum := sha1.Sum([]byte(src)) //nolint:gosec // G401: a name for the library's content
	n := "dlock_" + hex.EncodeToString(sum[:12])
	return &Function{Name: n, Lib: "#!lua name=" + n + "\n" + strings.ReplaceAll(src, name, n)}
}

// FunctionMissing reports whether a server error reply says that FCALL's
// function is not loaded on the node: load its library and call again.
// (Error replies are matched with or without their "ERR " code, which
// valkey-go drops.)
func FunctionMissing(msg string) bool { return strings.HasPrefix(errText(msg), "function not found") }

// LibraryExists reports whether FUNCTION LOAD's error reply says that the
// library is loaded already (by another client, since the FCALL that
// missed it): it is there, as wanted.
func LibraryExists(msg string) bool {
	m := errText(msg)
	return strings.HasPrefix(m, "library '") && strings.HasSuffix(m, "' already exists")
}

// NoFunctions reports whether a server error reply to FCALL or FUNCTION
// LOAD says that the server has no functions: a server before Redis 7.0,
// or a proxy that does not pass them.
func NoFunctions(msg string) bool {
	m := errText(msg)
	return strings.HasPrefix(m, "unknown command") || strings.HasPrefix(m, "unknown subcommand")
}

// errText is an error reply's text in lower case, without its "ERR " code.
func errText(msg string) string {
	return strings.ToLower(strings.TrimPrefix(msg, "ERR "))
}

// Functions is a Client's use of function forms: FCALL while the server
// has functions, EVALSHA for every call from the first answer that says it
// has none or will not load one. The zero value calls functions.
type Functions struct {
	off atomic.Bool
}

// Of returns the function form to call sc by, or nil: sc has none, or the
// server showed it has no functions.
func (f *Functions) Of(sc *Script) *Function {
	if f.off.Load() {
		return nil
	}
	return sc.Function()
}

// Off sends every call by EVALSHA from now on: the server would not load a
// library, or missed a function right after its library loaded.
func (f *Functions) Off() { f.off.Store(true) }

// A FunctionStep is what a call that met an error reply needs next.
type FunctionStep int

const (
	// NoStep: the error is the call's answer.
	NoStep FunctionStep = iota
	// CallAgain: send the call again (by EVALSHA: the server has no
	// functions, and Of says so from now on).
	CallAgain
	// LoadAndCall: load the function's library where the call went, then
	// send it again; call Off when the load fails, or when the call
	// misses the function again.
	LoadAndCall
)

// Step returns what a call of sc needs after msg, the server's error reply
// to it (ok false: the call met no error reply).
func (f *Functions) Step(msg string, ok bool, sc *Script) FunctionStep {
	if !ok || sc.Function() == nil {
		return NoStep
	}
	switch {
	case NoFunctions(msg):
		f.Off()
		return CallAgain
	case FunctionMissing(msg) && !f.off.Load():
		return LoadAndCall
	case FunctionMissing(msg):
		return CallAgain // turned off meanwhile
	}
	return NoStep
}

// Settle returns r, the answer to a call of sc sent alone, or the answer
// to the call sent again as r's error asks (see Step): by loadAndCall,
// which loads the library and sends the call again by FCALL; by again
// when the server has no functions, the load failed or the call missed
// the function once more (functions are off then, and Of says so). errOf
// reads an answer's server error reply (ok false: none).
func Settle[R any](f *Functions, sc *Script, r R, errOf func(R) (msg string, ok bool), loadAndCall, again func() R) R {
	msg, ok := errOf(r)
	switch f.Step(msg, ok, sc) {
	case NoStep:
		return r
	case LoadAndCall:
		r = loadAndCall()
		msg, ok = errOf(r)
		if f.Step(msg, ok, sc) == NoStep {
			return r
		}
		f.Off()
	}
	return again()
}

// Retry is Step for a call sent among others (a pipeline, a batch): it
// reports whether the call must be sent again, having made the next try
// work. A function missing is loaded by load (which reports whether a
// node has the library now); one missing again after a load (again: this
// call was sent again for its function before), or a library that will not
// load, turns functions off.
func (f *Functions) Retry(msg string, ok, again bool, sc *Script, load func(*Function) bool) bool {
	switch f.Step(msg, ok, sc) {
	case CallAgain:
		return true
	case LoadAndCall:
		if again || !load(sc.Function()) {
			f.Off()
		}
		return true
	}
	return false
}
