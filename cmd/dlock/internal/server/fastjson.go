package server

// A fast path for the small bodies of /v1 acquire, extend and release:
// an object of plain fields (strings of printable ASCII without escapes,
// integers, true, false) with the struct's exact field names is decoded
// here, with the result encoding/json gives; anything else (other names,
// which encoding/json matches case-insensitively or refuses, null,
// escapes, other types, nesting) is left to encoding/json, which then
// answers as it always did. fastjson_test.go checks both agree.

// fastBodyBytes is the largest body tried on the fast path.
const fastBodyBytes = 512

// fastBody is a body type with a fast decoder. decodeFast reports whether
// it decoded data; when it did not, it left the value as it was.
type fastBody interface {
	decodeFast(data []byte) bool
}

// fastField is a plain value of a body: a string, an integer or a bool.
type fastField struct {
	kind byte // 's', 'n' or 'b'
	str  []byte
	num  int64
	b    bool
}

// scanFast scans data, one JSON object of plain fields and nothing after
// it but white space, calling set for each field in order. It returns
// false when data is not such an object or set returns false.
func scanFast(data []byte, set func(key []byte, f fastField) bool) bool {
	i := 0
	ws := func() {
		for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
			i++
		}
	}
	str := func() ([]byte, bool) {
		if i >= len(data) || data[i] != '"' {
			return nil, false
		}
		i++
		start := i
		for i < len(data) && data[i] != '"' {
			if c := data[i]; c < 0x20 || c > 0x7e || c == '\\' {
				return nil, false
			}
			i++
		}
		if i >= len(data) {
			return nil, false
		}
		i++
		return data[start : i-1], true
	}
	ws()
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i++
	ws()
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			key, ok := str()
			if !ok {
				return false
			}
			ws()
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i++
			ws()
			if i >= len(data) {
				return false
			}
			var f fastField
			switch c := data[i]; {
			case c == '"':
				f.kind = 's'
				if f.str, ok = str(); !ok {
					return false
				}
			case c == '-' || '0' <= c && c <= '9':
				f.kind = 'n'
				neg := c == '-'
				if neg {
					i++
				}
				start := i
				for i < len(data) && '0' <= data[i] && data[i] <= '9' {
					f.num = f.num*10 + int64(data[i]-'0')
					i++
				}
				// JSON has no leading zeros; 18 digits fit an int64. A
				// fraction or exponent ends the fast path.
				if n := i - start; n == 0 || n > 18 || n > 1 && data[start] == '0' {
					return false
				}
				if i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
					return false
				}
				if neg {
					f.num = -f.num
				}
			case c == 't' && len(data)-i >= 4 && string(data[i:i+4]) == "true":
				f.kind, f.b = 'b', true
				i += 4
			case c == 'f' && len(data)-i >= 5 && string(data[i:i+5]) == "false":
				f.kind = 'b'
				i += 5
			default:
				return false
			}
			if !set(key, f) {
				return false
			}
			ws()
			if i >= len(data) {
				return false
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return false
			}
			i++
			ws()
		}
	}
	ws()
	return i == len(data)
}

func (f fastField) int64p() (*int64, bool) {
	if f.kind != 'n' {
		return nil, false
	}
	v := f.num
	return &v, true
}

func (f fastField) string() (string, bool) { return string(f.str), f.kind == 's' }
func (f fastField) bool() (bool, bool)     { return f.b, f.kind == 'b' }

func (dst *acquireBody) decodeFast(data []byte) bool {
	var v acquireBody
	if !scanFast(data, func(key []byte, f fastField) (ok bool) {
		switch string(key) {
		case "ttlMs":
			v.TTLMs, ok = f.int64p()
		case "waitMs":
			v.WaitMs, ok = f.int64p()
		case "mode":
			v.Mode, ok = f.string()
		case "limit":
			v.Limit, ok = f.int64p()
		case "fair":
			v.Fair, ok = f.bool()
		case "owner":
			v.Owner, ok = f.string()
		case "token":
			v.Token, ok = f.string()
		case "queue":
			v.Queue, ok = f.bool()
		case "queueTtlMs":
			v.QueueTTLMs, ok = f.int64p()
		case "lockDelayMs":
			v.LockDelayMs, ok = f.int64p()
		case "maxHoldMs":
			v.MaxHoldMs, ok = f.int64p()
		}
		return ok
	}) {
		return false
	}
	*dst = v
	return true
}

func (dst *tokenBody) decodeFast(data []byte) bool {
	var v tokenBody
	if !scanFast(data, func(key []byte, f fastField) (ok bool) {
		switch string(key) {
		case "token":
			var t string
			if t, ok = f.string(); ok {
				v.Token = &t
			}
		case "ttlMs":
			v.TTLMs, ok = f.int64p()
		case "mode":
			v.Mode, ok = f.string()
		}
		return ok
	}) {
		return false
	}
	*dst = v
	return true
}
