package redisproto

import (
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/store"
)

// TestFunctionForms: the mutex's fast-path acquire and short release have a
// function form (issue 41), the other scripts none; a form's library is the
// script's libraries, then one function that sets their per-call state back
// to nil and runs the operation; its name follows its source, so a change to
// the libraries (the fault suite's control swaps clock_lib in) names a
// library of its own.
func TestFunctionForms(t *testing.T) {
	ops, err := ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^dlock_[0-9a-f]{24}$`)
	op, err := Source("scripts/mutex_acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	fn := ops.Acquire.Function()
	if fn == nil || !name.MatchString(fn.Name) || !strings.HasPrefix(fn.Lib, "#!lua name="+fn.Name+"\n") {
		t.Fatalf("Acquire's function form = %+v", fn)
	}
	call := "callback = function(KEYS, ARGV)\nnow_ms = nil\nphi = nil\n" + string(op) + "\nend}\n"
	if !strings.HasSuffix(fn.Lib, call) || !strings.Contains(fn.Lib, "function_name = '"+fn.Name+"', flags = {}") {
		t.Errorf("Acquire's library does not end in its function, the state reset and the operation:\n%s", fn.Lib[max(len(fn.Lib)-len(call)-200, 0):])
	}
	if rel := ops.ShortRelease.Function(); rel == nil || !strings.Contains(rel.Lib, "flags = {'allow-oom'}") || rel.Name == fn.Name {
		t.Errorf("ShortRelease's function form = %+v; want its own, allow-oom (a release frees memory)", rel)
	}
	for _, sc := range []*Script{ops.FullAcquire, ops.Extend, ops.Release, ops.RecordRelease, ops.Raise, ops.Resume, ops.Force} {
		if sc.Function() != nil {
			t.Errorf("%s: a function form; want none", sc.Name)
		}
	}

	// Another clock_lib in front of the same operation, as the fault
	// suite's control makes it.
	swapped := *ops.Acquire
	lib := "local now_ms\nlocal a, b -- state\nlocal function issue() end\n"
	at := strings.Index(swapped.Src, string(op))
	if at < 0 {
		t.Fatal("the acquire's source does not hold mutex_acquire.lua")
	}
	swapped.Src = lib + swapped.Src[at:]
	sum := sha1.Sum([]byte(swapped.Src)) // as newScript
	swapped.SHA = hex.EncodeToString(sum[:])
	other := swapped.Function()
	if other == nil || other.Name == fn.Name || !strings.HasSuffix(other.Lib, "callback = function(KEYS, ARGV)\nnow_ms = nil\na = nil\nb = nil\n"+string(op)+"\nend}\n") {
		t.Errorf("function form after the swap = %+v", other)
	}
	if again := ops.Acquire.Function(); again.Name != fn.Name {
		t.Errorf("the embedded script's form changed: %s, then %s", fn.Name, again.Name)
	}
}

// TestFunctionErrors reads the error replies Redis 7.0 gives, with and
// without the "ERR " code that valkey-go drops.
func TestFunctionErrors(t *testing.T) {
	for _, tt := range []struct {
		msg                    string
		missing, exists, nofns bool
	}{
		{"ERR Function not found", true, false, false},
		{"Function not found", true, false, false},
		{"ERR Library 'dlock_0123' already exists", false, true, false},
		{"Library 'dlock_0123' already exists", false, true, false},
		{"ERR unknown command 'FCALL', with args beginning with: 'dlock_01' '3' ", false, false, true},
		{"unknown subcommand 'LOAD'. Try FUNCTION HELP.", false, false, true},
		{"NOPERM User nofn has no permissions to run the 'function|load' command", false, false, false},
		{"NOSCRIPT No matching script. Please use EVAL.", false, false, false},
	} {
		if FunctionMissing(tt.msg) != tt.missing || LibraryExists(tt.msg) != tt.exists || NoFunctions(tt.msg) != tt.nofns {
			t.Errorf("%q: missing %v, exists %v, no functions %v; want %v, %v, %v", tt.msg,
				FunctionMissing(tt.msg), LibraryExists(tt.msg), NoFunctions(tt.msg), tt.missing, tt.exists, tt.nofns)
		}
	}
}

// TestFunctionSteps: what a call of a script with a function form does
// after each answer, and when the function forms are turned off for good.
func TestFunctionSteps(t *testing.T) {
	ops, err := ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		t.Fatal(err)
	}
	sc := ops.Acquire
	var f Functions
	if f.Of(sc) == nil || f.Of(ops.Extend) != nil {
		t.Fatalf("Of: the acquire's form %v, the extend's %v; want one, none", f.Of(sc), f.Of(ops.Extend))
	}
	if f.Step("", false, sc) != NoStep || f.Step("WRONGTYPE Operation against a key", true, sc) != NoStep ||
		f.Step("Function not found", true, ops.Extend) != NoStep {
		t.Error("Step: not a function's error, or no function form; want NoStep")
	}
	loads := 0
	load := func(ok bool) func(*Function) bool {
		return func(fn *Function) bool {
			if fn != sc.Function() {
				t.Errorf("load of %v, want the acquire's form", fn)
			}
			loads++
			return ok
		}
	}
	if !f.Retry("Function not found", true, false, sc, load(true)) || loads != 1 || f.Of(sc) == nil {
		t.Fatalf("Retry after a miss: loads %d, form %v; want one load, functions on", loads, f.Of(sc))
	}
	if again := f.Retry("Function not found", true, true, sc, load(true)); !again || loads != 1 || f.Of(sc) != nil {
		t.Fatalf("Retry after a miss following a load = %v: loads %d, form %v; want a retry, no load, functions off", again, loads, f.Of(sc))
	}
	if f.Step("Function not found", true, sc) != CallAgain {
		t.Error("Step after functions went off: want CallAgain (by EVALSHA)")
	}

	var g Functions
	if !g.Retry("ERR Function not found", true, false, sc, load(false)) || g.Of(sc) != nil {
		t.Error("Retry with a load that failed: want a retry, functions off")
	}
	var h Functions
	if h.Step("ERR unknown command 'FCALL', with args beginning with: ", true, sc) != CallAgain || h.Of(sc) != nil {
		t.Error("Step on a server without FCALL: want CallAgain, functions off")
	}
}

// TestSettle: a lone call's answer after an error, for each answer the
// load and the call again may get.
func TestSettle(t *testing.T) {
	ops, err := ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		t.Fatal(err)
	}
	errOf := func(r string) (string, bool) { return r, r != "ok" }
	for _, tt := range []struct {
		first, loaded string // the first answer; the answer after the load
		want          string
		loads         int
		off           bool
	}{
		{"WRONGTYPE", "", "WRONGTYPE", 0, false},
		{"Function not found", "ok", "ok", 1, false},
		{"Function not found", "Function not found", "again", 1, true},
		{"unknown command 'FCALL'", "", "again", 0, true},
	} {
		var f Functions
		loads := 0
		got := Settle(&f, ops.Acquire, tt.first, errOf,
			func() string { loads++; return tt.loaded },
			func() string { return "again" })
		if got != tt.want || loads != tt.loads || (f.Of(ops.Acquire) == nil) != tt.off {
			t.Errorf("after %q then %q: %q, %d loads, off %v; want %q, %d, %v",
				tt.first, tt.loaded, got, loads, f.Of(ops.Acquire) == nil, tt.want, tt.loads, tt.off)
		}
	}
}
