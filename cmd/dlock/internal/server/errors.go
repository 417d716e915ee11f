package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net/http"
	"strconv"
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
