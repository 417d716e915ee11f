package valkey

import (
	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The Lua scripts, the key layout and the reply formats are those of package
// internal/redisproto, which store/goredis runs too.

// cmd builds the EVALSHA command of sc, or the EVAL command when eval is set.
func cmd(c vk.Client, sc *redisproto.Script, keys, args []string, eval bool) vk.Completed {
	if eval {
		return c.B().Eval().Script(sc.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return c.B().Evalsha().Sha1(sc.SHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func isNoScript(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}

// parseGrant decodes the reply of an acquire script.
func parseGrant(r vk.ValkeyResult) (store.Grant, error) {
	if m, err := r.ToMessage(); err == nil && m.IsInt64() {
		f, _ := m.AsInt64()
		return redisproto.Granted(f)
	}
	v, err := r.AsIntSlice()
	if err != nil {
		return store.Grant{}, err
	}
	return redisproto.ParseGrant(v)
}
