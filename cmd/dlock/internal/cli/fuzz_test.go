package cli

import (
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

// FuzzParseArgs parses the arguments (NUL-separated) and the DLOCK_TTL and
// DLOCK_WAIT environment of every command. Parsing never panics; a refusal
// is a usage error (exit code 64 from Main, naming the bad environment
// variable when it is one); an accepted command line round-trips: its
// flags written back as --name=value, then "--", its positionals and tail,
// parse to the same values.
func FuzzParseArgs(f *testing.F) {
	for i := range commands() {
		for _, seed := range [][3]string{
			{"job\x00--\x00echo\x00hi", "", ""},
			{"--ttl\x005s\x00job\x00--wait=1m\x00--\x00cmd", "", ""},
			{"-ttl\x00-5s\x00job\x00cmd\x00--ttl\x001s", "", ""},
			{"--\x00--job\x00cmd", "2m", "3s"},
			{"job\x00cmd", "soon", ""},
			{"job\x00cmd", "", "1e3h"},
			{"--ttl=9223372036854775807ns\x00job", "", "-0"},
			{"--ttl=2562048h\x00job", "", ""},
			{"--token\x00\x00--json=maybe\x00job", "", ""},
			{"--json\x00--wait\x00.5s\x00j\x00--", "1.5h", "0"},
			{"---ttl=1s\x00job", "", ""},
			{"-h", "", ""},
		} {
			f.Add(uint8(i), seed[0], seed[1], seed[2])
		}
	}
	f.Fuzz(func(t *testing.T, ci uint8, argv, ttlEnv, waitEnv string) {
		c := commands()[int(ci)%len(commands())]
		var args []string
		if argv != "" {
			args = strings.Split(argv, "\x00")
		}
		env := Env{Getenv: envMap("DLOCK_TTL="+ttlEnv, "DLOCK_WAIT="+waitEnv)}
		x := newCmd(c, env)
		pos, tail, err := x.fs.parse(args, len(c.argNames), c.tail)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%s: parse(%q) error has no message", c.name, args)
			}
			// A bad variable is named (parse stops at the first).
			var bad []string
			for _, e := range []struct{ name, val string }{{"DLOCK_TTL", ttlEnv}, {"DLOCK_WAIT", waitEnv}} {
				if x.fs.fs.Lookup(strings.ToLower(strings.TrimPrefix(e.name, "DLOCK_"))) == nil || e.val == "" {
					continue
				}
				if _, perr := time.ParseDuration(e.val); perr != nil {
					bad = append(bad, e.name)
				}
			}
			if len(bad) > 0 && !slices.ContainsFunc(bad, func(v string) bool { return strings.Contains(err.Error(), v) }) {
				t.Fatalf("%s: parse with DLOCK_TTL=%q DLOCK_WAIT=%q = %v, want an error naming %s", c.name, ttlEnv, waitEnv, err, strings.Join(bad, " or "))
			}
			if err == flag.ErrHelp {
				return
			}
			// Main stops at the same error, before any store or command.
			if code := Main(context.Background(), append([]string{c.name}, args...), env); code != runner.ExitUsage {
				t.Fatalf("Main(%q) = %d after parse error %v, want %d", append([]string{c.name}, args...), code, err, runner.ExitUsage)
			}
			return
		}
		if len(pos) > len(c.argNames) || (!c.tail && len(tail) > 0) {
			t.Fatalf("%s: parse(%q) = %q, %q; want at most %d positionals and no tail", c.name, args, pos, tail, len(c.argNames))
		}
		if len(pos) < len(c.argNames) && len(tail) > 0 {
			t.Fatalf("%s: parse(%q) = %q, %q; a tail before every positional", c.name, args, pos, tail)
		}
		vals := flagValues(x)
		for _, name := range []string{"ttl", "wait"} {
			if v, ok := vals[name]; ok {
				d, perr := time.ParseDuration(v)
				if got := x.fs.fs.Lookup(name).Value.(flag.Getter).Get().(time.Duration); perr != nil || d != got {
					t.Fatalf("%s: --%s = %v prints as %q, which parses as %v, %v", c.name, name, got, v, d, perr)
				}
			}
		}
		canon := make([]string, 0, len(vals)+1+len(pos)+len(tail))
		for _, name := range slices.Sorted(mapKeys(vals)) {
			canon = append(canon, "--"+name+"="+vals[name])
		}
		canon = append(canon, "--")
		canon = append(append(canon, pos...), tail...)
		y := newCmd(c, env)
		pos2, tail2, err := y.fs.parse(canon, len(c.argNames), c.tail)
		if err != nil || !slices.Equal(pos, pos2) || !slices.Equal(tail, tail2) {
			t.Fatalf("%s: parse(%q) = %q, %q; its canonical form %q parses as %q, %q, %v", c.name, args, pos, tail, canon, pos2, tail2, err)
		}
		for name, v := range flagValues(y) {
			if v != vals[name] {
				t.Fatalf("%s: parse(%q) sets --%s=%q; its canonical form %q sets %q", c.name, args, name, vals[name], canon, v)
			}
		}
	})
}

func flagValues(x *cmd) map[string]string {
	vals := map[string]string{}
	x.fs.fs.VisitAll(func(fl *flag.Flag) { vals[fl.Name] = fl.Value.String() })
	return vals
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// FuzzCheckLease checks the validation of a lease's name, TTL, wait and
// token by acquire, extend and release: never a panic, a refusal is exit
// code 64, and what passes is within the documented limits.
func FuzzCheckLease(f *testing.F) {
	f.Add("job", int64(30*time.Second), int64(0), "", false)
	f.Add("", int64(0), int64(-1), "00", true)
	f.Add(strings.Repeat("n", 256), int64(dlock.MinTTL), int64(0), strings.Repeat("a", 32), true)
	f.Add(strings.Repeat("n", 257), int64(dlock.MaxTTL+1), int64(0), strings.Repeat("A", 129), true)
	f.Add("\xff", int64(dlock.MinTTL-1), int64(1), "0123456789abcdef0123456789abcdeg", false)
	f.Add("a\x7fb", int64(-1), int64(1<<62), strings.Repeat("f", 33), true)
	f.Fuzz(func(t *testing.T, name string, ttl, wait int64, token string, needToken bool) {
		x := newCmd(acquireCmd, Env{Getenv: envMap(), Stderr: &strings.Builder{}})
		lf := &leaseFlags{ttl: time.Duration(ttl), wait: time.Duration(wait), token: token}
		code := x.checkLease(name, lf, needToken)
		if code != 0 && code != runner.ExitUsage {
			t.Fatalf("checkLease(%q, ttl %v, wait %v, token %q) = %d, want 0 or %d", name, lf.ttl, lf.wait, token, code, runner.ExitUsage)
		}
		if code != 0 {
			if x.env.Stderr.(*strings.Builder).Len() == 0 {
				t.Fatalf("checkLease(%q, ttl %v, wait %v, token %q) = %d with no message", name, lf.ttl, lf.wait, token, code)
			}
			return
		}
		if err := dlock.ValidName(name); err != nil {
			t.Fatalf("checkLease accepted name %q: %v", name, err)
		}
		if lf.ttl != 0 && (lf.ttl < dlock.MinTTL || lf.ttl > dlock.MaxTTL) || lf.wait < 0 {
			t.Fatalf("checkLease accepted ttl %v, wait %v", lf.ttl, lf.wait)
		}
		if (needToken && token == "") || (token != "" && !validToken(token)) {
			t.Fatalf("checkLease accepted token %q (needed %v)", token, needToken)
		}
	})
}
