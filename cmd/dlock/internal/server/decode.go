package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-dev/dlock/store"
)

// Reading requests: JSON bodies decoded strictly, and the millisecond
// fields and query parameters every endpoint shares. Every error is a 400
// naming the field (or a 413 for a body over MaxBodyBytes).

// decodeJSON decodes one JSON object from r into v strictly: unknown
// fields, wrong types and anything after the object are errors. An empty
// body decodes as {} when emptyOK. The errors are 400s naming the field,
// or 413 for a body over [MaxBodyBytes].
func decodeJSON(r io.Reader, v any, emptyOK bool) *apiError {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	return decodeOne(dec, v, emptyOK)
}

// decodeOne decodes one JSON object from dec into v, and nothing after it,
// with the errors of decodeJSON.
func decodeOne(dec *json.Decoder, v any, emptyOK bool) *apiError {
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && emptyOK {
			return nil
		}
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			if e := jsonError(err); e.Status == http.StatusRequestEntityTooLarge {
				return e
			}
		}
		return badField("body", "must hold one JSON object and nothing after it")
	}
	return nil
}

func jsonError(err error) *apiError {
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &maxErr):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Error: "body too large",
			Message: fmt.Sprintf("the body must be at most %d bytes", MaxBodyBytes)}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return badField("body", "must be a JSON object")
		}
		want := typeErr.Type.String()
		switch want {
		case "int64", "*int64", "int":
			want = "an integer"
		case "bool":
			want = "true or false"
		case "string":
			want = "a string"
		}
		return badField(field, "must be "+want)
	case errors.As(err, &syntaxErr):
		return badField("body", fmt.Sprintf("is not valid JSON (offset %d)", syntaxErr.Offset))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badField("body", "is empty or truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		f, _ = strconv.Unquote(f)
		if f == "" {
			f = "body"
		}
		return &apiError{Status: http.StatusBadRequest, Error: "unknown field", Field: f,
			Message: fmt.Sprintf("unknown field %q", f)}
	}
	return badField("body", "is not valid JSON")
}

// msParam parses an integer query parameter in [lo, hi].
func msParam(r *http.Request, name string, def, lo, hi int64) (int64, *apiError) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, badField(name, fmt.Sprintf("must be an integer from %d to %d", lo, hi))
	}
	return v, nil
}

// holdTimes reads the ttlMs (default DefaultTTLMs), waitMs and lockDelayMs
// fields of a campaign or a multi-lock acquire.
func (s *Server) holdTimes(ttlMs, waitMs, lockDelayMs *int64) (ttl, wait, delay time.Duration, e *apiError) {
	if ttl, e = msField("ttlMs", ttlMs, MinTTLMs, MaxTTLMs); e != nil {
		return
	}
	if ttl == 0 {
		ttl = DefaultTTLMs * time.Millisecond
	}
	if wait, e = msField("waitMs", waitMs, 0, MaxWaitMs); e != nil {
		return
	}
	if delay, e = msField("lockDelayMs", lockDelayMs, 0, MaxLockDelayMs); e != nil {
		return
	}
	return ttl, wait, delay, s.lockDelayError(delay)
}

// msField validates an optional millisecond field.
func msField(field string, v *int64, lo, hi int64) (time.Duration, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < lo || *v > hi {
		return 0, badField(field, fmt.Sprintf("must be from %d to %d", lo, hi))
	}
	return time.Duration(*v) * time.Millisecond, nil
}

// lockDelayError is the 400 for a lock-delay on a store that cannot keep
// one (store.LockDelayer), or nil.
func (s *Server) lockDelayError(delay time.Duration) *apiError {
	if delay == 0 || store.SupportsLockDelay(s.locker.Store()) {
		return nil
	}
	return &apiError{Status: http.StatusBadRequest, Error: "not supported", Field: "lockDelayMs",
		Message: "the store cannot keep a lock-delay: it does not end holds by its own clock"}
}

// minHoldError is the 400 for a min hold on a store that cannot keep a
// name past a release (store.MinHolder), or nil.
func (s *Server) minHoldError(minHold time.Duration) *apiError {
	if minHold == 0 || store.SupportsMinHold(s.locker.Store()) {
		return nil
	}
	return &apiError{Status: http.StatusBadRequest, Error: "not supported", Field: "minHoldMs",
		Message: "the store cannot keep a min hold: a released lock is free at once"}
}

func validToken(t string) *apiError {
	if len(t) < 32 || len(t) > 128 {
		return badField("token", "must be 32 to 128 hexadecimal characters")
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return badField("token", "must be 32 to 128 hexadecimal characters")
		}
	}
	return nil
}

func validText(field, s string) *apiError {
	if s == "" || len(s) > 256 {
		return badField(field, "must be 1 to 256 bytes")
	}
	if !utf8.ValidString(s) {
		return badField(field, "must be valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return badField(field, "must not contain control characters")
		}
	}
	return nil
}
