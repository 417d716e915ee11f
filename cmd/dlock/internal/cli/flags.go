package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// flagSet is a flag.FlagSet whose flags take their defaults from DLOCK_*
// environment variables and whose usage lists flags in definition order
// with their env var.
type flagSet struct {
	fs     *flag.FlagSet
	getenv func(string) string
	order  []flagDoc
	envErr error
}

type flagDoc struct {
	name, arg, env, usage, def string
}

func newFlagSet(name string, getenv func(string) string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &flagSet{fs: fs, getenv: getenv}
}

func (f *flagSet) doc(name, arg, env, def, usage string) {
	f.order = append(f.order, flagDoc{name: name, arg: arg, env: env, usage: usage, def: def})
}

func (f *flagSet) envFail(env, val string, err error) {
	if f.envErr == nil {
		f.envErr = fmt.Errorf("dlock: bad %s=%q: %v", env, val, err)
	}
}

func (f *flagSet) String(p *string, name, arg, env, def, usage string) {
	v := def
	if e := f.getenv(env); e != "" {
		v = e
	}
	f.fs.StringVar(p, name, v, usage)
	f.doc(name, arg, env, def, usage)
}

func (f *flagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	v := def
	if e := f.getenv(env); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil {
			f.envFail(env, e, errors.New("not a duration like 30s or 1m30s"))
		} else {
			v = d
		}
	}
	f.fs.DurationVar(p, name, v, usage)
	f.doc(name, "DURATION", env, def.String(), usage)
}

func (f *flagSet) Int(p *int, name, arg, env string, def int, usage string) {
	v := def
	if e := f.getenv(env); e != "" {
		n, err := strconv.Atoi(e)
		if err != nil {
			f.envFail(env, e, errors.New("not an integer"))
		} else {
			v = n
		}
	}
	f.fs.IntVar(p, name, v, usage)
	f.doc(name, arg, env, strconv.Itoa(def), usage)
}

func (f *flagSet) Bool(p *bool, name, env, usage string) {
	v := false
	if e := f.getenv(env); e != "" {
		b, err := strconv.ParseBool(e)
		if err != nil {
			f.envFail(env, e, errors.New("not a boolean like 1, true, 0 or false"))
		} else {
			v = b
		}
	}
	f.fs.BoolVar(p, name, v, usage)
	f.doc(name, "", env, "", usage)
}

// parse parses args, allowing flags before and after positional arguments.
// It collects up to npos positional arguments; with rest set, everything
// after them (after an optional "--") is returned as the tail, else
// leftover arguments are an error.
func (f *flagSet) parse(args []string, npos int, rest bool) (pos, tail []string, err error) {
	if f.envErr != nil {
		return nil, nil, f.envErr
	}
	for {
		if err := f.fs.Parse(args); err != nil {
			return nil, nil, err
		}
		left := f.fs.Args()
		dashdash := len(left) < len(args) && args[len(args)-len(left)-1] == "--"
		if dashdash {
			// Everything after "--" is positional.
			for len(pos) < npos && len(left) > 0 {
				pos, left = append(pos, left[0]), left[1:]
			}
			if rest {
				return pos, left, nil
			}
			if len(left) > 0 {
				return nil, nil, fmt.Errorf("unexpected argument %q", left[0])
			}
			return pos, nil, nil
		}
		if len(left) == 0 {
			return pos, nil, nil
		}
		if len(pos) == npos {
			if rest {
				return pos, left, nil
			}
			return nil, nil, fmt.Errorf("unexpected argument %q", left[0])
		}
		pos, args = append(pos, left[0]), left[1:]
	}
}

// usage writes the flag list.
func (f *flagSet) usage(w io.Writer) {
	if len(f.order) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	width := 0
	heads := make([]string, len(f.order))
	for i, d := range f.order {
		h := "--" + d.name
		if d.arg != "" {
			h += " " + d.arg
		}
		heads[i] = h
		width = max(width, len(h))
	}
	for i, d := range f.order {
		var notes []string
		if d.def != "" && d.def != "0s" {
			notes = append(notes, "default "+d.def)
		}
		notes = append(notes, "env "+d.env)
		fmt.Fprintf(w, "  %-*s  %s (%s)\n", width, heads[i], d.usage, strings.Join(notes, "; "))
	}
}
