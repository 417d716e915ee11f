package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/dlock-dev/dlock"
)

// Writing answers: every JSON response goes through writeJSON or, for the
// bodies written on every /v1 acquire, extend and release and for the lock
// events, writeOK with a hand-written encoding: the same bytes
// encoding/json writes for these structs (field order, omitempty,
// HTML-safe escaping), without its reflection. encode_test.go checks each
// against json.Marshal.

// jsonBody is a body with a hand-written encoding.
type jsonBody interface{ appendJSON(b []byte) []byte }

// writeOK writes v as a 200, as writeJSON does.
func writeOK(w http.ResponseWriter, v jsonBody) {
	writeBody(w, http.StatusOK, v.appendJSON(make([]byte, 0, 256)))
}

// appendString appends s as a JSON string, escaped as json.Marshal does.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func (g *grantBody) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, g.Name)
	b = append(b, `,"token":`...)
	b = appendString(b, g.Token)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, g.Fence, 10)
	b = append(b, `,"ttlMs":`...)
	b = strconv.AppendInt(b, g.TTLMs, 10)
	b = append(b, `,"mode":`...)
	b = appendString(b, g.Mode)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(g.Count), 10)
	return append(b, '}')
}

func (r *releaseBody) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"released":`...)
	b = appendBool(b, r.Released)
	return append(b, '}')
}

func (e *extendBody) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, e.Name)
	if e.Fence != 0 {
		b = append(b, `,"fence":`...)
		b = strconv.AppendInt(b, e.Fence, 10)
	}
	b = append(b, `,"ttlMs":`...)
	b = strconv.AppendInt(b, e.TTLMs, 10)
	return append(b, '}')
}

func (e *eventBody) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"name":`...)
	b = appendString(b, e.Name)
	b = append(b, `,"mode":`...)
	b = appendString(b, e.Mode)
	if e.Result != "" {
		b = append(b, `,"result":`...)
		b = appendString(b, e.Result)
	}
	if e.Fence != 0 {
		b = append(b, `,"fence":`...)
		b = strconv.AppendInt(b, e.Fence, 10)
	}
	b = append(b, `,"durationMs":`...)
	b = strconv.AppendInt(b, e.DurationMs, 10)
	if e.Waited {
		b = append(b, `,"waited":true`...)
	}
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, e.Time, 10)
	b = append(b, `,"replica":`...)
	b = appendString(b, e.Replica)
	if e.By != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, e.By)
	}
	if len(e.Owners) > 0 {
		b = append(b, `,"owners":[`...)
		for i, o := range e.Owners {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, o)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// modeName is how the API reports a mode.
func modeName(m dlock.Mode) string { return m.String() }

// grantBody is the 200 answer to an acquire.
type grantBody struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Fence int64  `json:"fence"`
	TTLMs int64  `json:"ttlMs"`
	Mode  string `json:"mode"`
	Count int    `json:"count"`
}

type extendBody struct {
	Name  string `json:"name"`
	Fence int64  `json:"fence,omitempty"`
	TTLMs int64  `json:"ttlMs"`
}

type releaseBody struct {
	Name     string `json:"name"`
	Released bool   `json:"released"`
}

// eventBody is one lock event on the stream. It never carries tokens.
type eventBody struct {
	Type       string `json:"type"` // acquire, release, renew, lost, forced
	Name       string `json:"name"`
	Mode       string `json:"mode"`
	Result     string `json:"result,omitempty"`
	Fence      int64  `json:"fence,omitempty"`
	DurationMs int64  `json:"durationMs"`
	Waited     bool   `json:"waited,omitempty"`
	Time       int64  `json:"time"`    // unix ms
	Replica    string `json:"replica"` // the server instance that saw it
	// By and Owners are, in a "forced" event (a force-release), who forced
	// it and the owners of the holds it ended ("" for an unknown one).
	By     string   `json:"by,omitempty"`
	Owners []string `json:"owners,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are marshalled; cannot happen
		code, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"cannot encode response"}`)
	}
	writeBody(w, code, b)
}

// writeBody writes b, a JSON value, as writeJSON does.
func writeBody(w http.ResponseWriter, code int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
