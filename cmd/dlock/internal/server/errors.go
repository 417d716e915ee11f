package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// apiError is the body of every error response: a short stable code in
// Error, a sentence for people in Message, and for bad input the name of
// the rejected field.
type apiError struct {
	Status       int    `json:"-"`
	Error        string `json:"error"`
	Message      string `json:"message"`
	Field        string `json:"field,omitempty"`
	RetryAfterMs *int64 `json:"retryAfterMs,omitempty"`
	// HeldMode is, on a 409, the mode of the hold that refused the request
	// (a name is one lock, whatever pattern holds it).
	HeldMode string `json:"heldMode,omitempty"`
	// Name is, on a 409 to a multi-lock acquire, the name found held.
	Name string `json:"name,omitempty"`
}

func badField(field, reason string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Error: "invalid " + field, Message: field + " " + reason, Field: field}
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

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeAPIError(w, &apiError{Status: code, Error: errCode, Message: msg})
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfterMs != nil {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(*e.RetryAfterMs), 10))
	}
	writeJSON(w, e.Status, e)
}

// retryAfterSeconds is the Retry-After header for a wait of ms
// milliseconds: whole seconds, rounded up, at least 1.
func retryAfterSeconds(ms int64) int64 {
	return max((ms+999)/1000, 1)
}

// errShuttingDown is the cause of the contexts cancelled when shutdown
// begins.
var errShuttingDown = errors.New("dlock: server shutting down")

// lockError maps an error of the Locker to a response. ctx is the
// request's (possibly wait-limited) context.
func lockError(ctx context.Context, name string, err error) *apiError {
	var locked *dlock.LockedError
	var inv *dlock.InvalidError
	var limit *dlock.LimitError
	switch {
	case context.Cause(ctx) == errShuttingDown || errors.Is(err, dlock.ErrClosed):
		// Checked first: a wait cut short by shutdown also reports the lock
		// it was waiting for.
		one := int64(1000)
		return &apiError{Status: http.StatusServiceUnavailable, Error: "shutting down",
			Message: "the server is shutting down; retry on another instance", RetryAfterMs: &one}
	case errors.As(err, &locked) || errors.Is(err, dlock.ErrLocked):
		var ms int64
		if locked != nil {
			ms = locked.RetryAfter.Milliseconds()
			if locked.RetryAfter%time.Millisecond != 0 {
				ms++
			}
		}
		e := &apiError{Status: http.StatusConflict, Error: "locked",
			Message: fmt.Sprintf("lock %q is held by another holder", name), RetryAfterMs: &ms}
		if locked != nil {
			e.HeldMode = modeName(locked.Held)
			a := "a"
			if locked.Held == dlock.ModeElection {
				a = "an"
			}
			e.Message = fmt.Sprintf("lock %q is held by another holder (%s %s hold)", name, a, e.HeldMode)
		}
		return e
	case errors.Is(err, dlock.ErrNoQuorum):
		return &apiError{Status: http.StatusServiceUnavailable, Error: "no quorum", Message: err.Error()}
	case errors.Is(err, dlock.ErrUnavailable):
		return &apiError{Status: http.StatusServiceUnavailable, Error: "store unavailable", Message: err.Error()}
	case errors.Is(err, dlock.ErrMaxHold):
		return &apiError{Status: http.StatusGone, Error: "lease lost", Message: fmt.Sprintf("the lease on lock %q reached its maxHoldMs", name)}
	case errors.Is(err, dlock.ErrLeaseLost), errors.Is(err, dlock.ErrNotHeld):
		return &apiError{Status: http.StatusGone, Error: "lease lost", Message: fmt.Sprintf("the token does not hold lock %q", name)}
	case errors.As(err, &inv):
		return badField(inv.Field, inv.Reason)
	case errors.As(err, &limit):
		return &apiError{Status: http.StatusBadRequest, Error: "invalid limit", Field: "limit",
			Message: fmt.Sprintf("limit %d differs from the limit %d that the permits of %q are held with", limit.Asked, limit.Held, name)}
	case errors.Is(err, dlock.ErrNotSupported):
		return &apiError{Status: http.StatusBadRequest, Error: "not supported", Field: "mode",
			Message: "the store cannot provide this mode: " + err.Error()}
	case errors.Is(err, dlock.ErrUpgrade):
		return &apiError{Status: http.StatusConflict, Error: "upgrade", Message: err.Error()}
	case ctx.Err() != nil:
		// The client went away (or its wait ended without a refusal
		// being seen, which only happens with a failing store).
		return &apiError{Status: 499, Error: "canceled", Message: "the request was canceled"}
	default:
		return &apiError{Status: http.StatusServiceUnavailable, Error: "store unavailable", Message: err.Error()}
	}
}

// decodeJSON decodes one JSON object from r into v strictly: unknown
// fields, wrong types and anything after the object are errors. An empty
// body decodes as {} when emptyOK. The errors are 400s naming the field,
// or 413 for a body over [MaxBodyBytes].
func decodeJSON(r io.Reader, v any, emptyOK bool) *apiError {
	if fb, ok := v.(fastBody); ok {
		// A small body is read whole and, when plain, decoded without
		// encoding/json (fastjson.go); otherwise the decoder below reads
		// the same bytes, and the same error after them.
		buf := make([]byte, fastBodyBytes)
		n, err := io.ReadFull(r, buf)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			if fb.decodeFast(buf[:n]) {
				return nil
			}
			r = bytes.NewReader(buf[:n])
		case err == nil:
			r = io.MultiReader(bytes.NewReader(buf), r)
		default:
			r = io.MultiReader(bytes.NewReader(buf[:n]), errReader{err})
		}
	}
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

func durationMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(float64(d) / float64(time.Millisecond)))
}

// slogPrinter adapts a slog.Logger to promhttp's Println logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Warn("dlock: metrics: " + fmt.Sprint(v...)) }

// slogLogger routes net/http's own error log (TLS handshakes, bad
// requests) to l at Debug.
func slogLogger(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelDebug)
}
