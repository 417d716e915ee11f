// Package httpstore is a [store.Store] that talks to a remote `dlock serve`
// over its /v1 lease API, so that `dlock run --server URL` uses the same
// dlock.Locker code (renewal scheduler, lease loss, waiting) as a direct
// Redis connection.
//
// Every Store method is one HTTP request (Extend sends one per lease, in
// parallel). Tokens travel in request bodies, never in URLs. The server
// does the locking on its own store; this package only translates:
//
//   - Acquire: POST /v1/locks/{name}/acquire with the caller's token, so a
//     retried acquire is idempotent; 200 is a grant, 409 a refusal with the
//     holder's remaining time.
//
//   - Extend and Release: POST .../extend and .../release; 410 means the
//     token no longer holds the lock ([store.ErrNotHeld]).
//
//   - State and List: GET /v1/locks/{name} and GET /v1/locks.
//
//   - Ping: GET /health.
//
//   - Watch: GET /v1/events, the server-sent event stream, filtered to
//     the lock's release and loss events and to snapshots in which the
//     lock is free.
//
// Only exclusive locks ([store.ModeMutex]) are supported; other modes return
// an error wrapping [store.ErrNotSupported].
package httpstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var (
	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
	_ store.Pinger    = (*Store)(nil)
)

// maxReply bounds the size of a reply body the client reads.
const maxReply = 4 << 20

// Store is a client of one `dlock serve` instance. It is safe for concurrent
// use. The zero value is not usable; call New.
type Store struct {
	base  *url.URL
	auth  string
	hc    *http.Client
	ua    string
	owned bool // hc was created by New and is closed by Close
	tlsc  *tls.Config

	watchMu sync.Mutex
	stream  *eventStream // shared by every Watch; nil when none
}

// Option configures a Store.
type Option func(*Store)

// WithAuthToken sets the bearer token sent with every request (the server's
// DLOCK_AUTH_TOKEN). Default none.
func WithAuthToken(token string) Option {
	return func(s *Store) { s.auth = token }
}

// WithHTTPClient sets the HTTP client. Default: a client of its own with a
// 10s timeout per request.
func WithHTTPClient(hc *http.Client) Option {
	return func(s *Store) {
		if hc != nil {
			s.hc, s.owned = hc, false
		}
	}
}

// WithTLSConfig sets the TLS configuration of the Store's own HTTP client
// for an https:// server: the CAs it trusts (RootCAs) and the client
// certificate it presents (Certificates). Default: the system's roots and
// no client certificate. It has no effect with WithHTTPClient.
func WithTLSConfig(c *tls.Config) Option {
	return func(s *Store) { s.tlsc = c }
}

// WithUserAgent sets the User-Agent header. Default "dlock".
func WithUserAgent(ua string) Option {
	return func(s *Store) { s.ua = ua }
}

// New returns a Store for the server at baseURL (for example
// "http://127.0.0.1:3009"). It returns an [*store.InvalidError] when baseURL
// is not an absolute http or https URL. It does not contact the server; see
// [Store.Ping].
func New(baseURL string, opts ...Option) (*Store, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &store.InvalidError{Field: "server", Reason: "must be an http:// or https:// URL"}
	}
	if u.User != nil {
		return nil, &store.InvalidError{Field: "server", Reason: "must not carry credentials; use the auth token"}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // one server: keep connections for concurrent renewals
	s := &Store{
		base:  u,
		hc:    &http.Client{Timeout: 10 * time.Second, Transport: tr},
		ua:    "dlock",
		owned: true,
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if s.owned && s.tlsc != nil {
		tr.TLSClientConfig = s.tlsc.Clone()
	}
	return s, nil
}

// Close ends the event stream of watches still running (their channels
// receive a last wake-up) and closes the idle connections of the Store's
// own HTTP client.
func (s *Store) Close() error {
	s.watchMu.Lock()
	if s.stream != nil {
		s.stream.close()
		s.stream = nil
	}
	s.watchMu.Unlock()
	if s.owned {
		s.hc.CloseIdleConnections()
	}
	return nil
}

// String returns the server URL.
func (s *Store) String() string { return s.base.String() }

type acquireBody struct {
	TTLMs     int64  `json:"ttlMs"`
	Mode      string `json:"mode"`
	Owner     string `json:"owner,omitempty"`
	Token     string `json:"token"`
	Data      string `json:"data,omitempty"`
	MinHoldMs int64  `json:"minHoldMs,omitempty"`
	MaxHoldMs int64  `json:"maxHoldMs,omitempty"`
}

type grantReply struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Fence int64  `json:"fence"`
	TTLMs int64  `json:"ttlMs"`
}

type errorReply struct {
	Error        string `json:"error"`
	Message      string `json:"message"`
	Field        string `json:"field"`
	RetryAfterMs *int64 `json:"retryAfterMs"`
	HeldMode     string `json:"heldMode"`
}

type tokenBody struct {
	Token string `json:"token"`
	TTLMs int64  `json:"ttlMs,omitempty"`
}

func checkMode(m store.Mode) error {
	if m != store.ModeMutex {
		return fmt.Errorf("%w: remote store mode %v", store.ErrNotSupported, m)
	}
	return nil
}

// Acquire implements [store.Store]: one attempt, never waiting on the server.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := checkMode(req.Mode); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	// The server records the hold's owner, data and bounds; "mutex" by
	// name, since "exclusive" with an owner would be a reentrant lock.
	body := acquireBody{TTLMs: req.TTL.Milliseconds(), Mode: "mutex", Token: req.Token, Owner: req.Holder,
		Data: req.Data, MinHoldMs: ceilMs(req.MinHold), MaxHoldMs: ceilMs(req.MaxHold)}
	var g grantReply
	status, er, hdr, err := s.do(ctx, http.MethodPost, lockPath(req.Name, "acquire"), body, &g)
	if err != nil {
		return store.Grant{}, &store.StoreError{Op: "acquire", Node: -1, Err: err}
	}
	switch status {
	case http.StatusOK, http.StatusCreated:
		if g.Token != "" && g.Token != req.Token {
			// The server chose its own token: give that hold back and fail
			// rather than hold a lock the Locker cannot renew.
			_ = s.Release(context.WithoutCancel(ctx), store.Request{Name: req.Name, Token: g.Token})
			return store.Grant{}, &store.StoreError{Op: "acquire", Node: -1, Err: errors.New("server ignored the client's token")}
		}
		return store.Grant{Acquired: true, Fence: g.Fence, Count: 1}, nil
	case http.StatusConflict, http.StatusLocked:
		held, _ := store.ParseMode(er.HeldMode) // a mutex when the server does not say
		return store.Grant{RetryAfter: retryAfter(er, hdr), Held: held}, nil
	}
	return store.Grant{}, s.statusError("acquire", status, er)
}

// ceilMs is d in whole milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// retryAfter reads the holder's remaining time from a refusal: the body's
// retryAfterMs when present, else the Retry-After header (whole seconds).
func retryAfter(er errorReply, hdr http.Header) time.Duration {
	if er.RetryAfterMs != nil && *er.RetryAfterMs > 0 {
		return time.Duration(*er.RetryAfterMs) * time.Millisecond
	}
	if n, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}

// Extend implements [store.Store], with one request per lease in parallel.
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { errs[i] = s.tokenOp(ctx, "extend", r, true, nil) })
	}
	wg.Wait()
	return errs
}

// Release implements [store.Store].
func (s *Store) Release(ctx context.Context, req store.Request) error {
	return s.tokenOp(ctx, "release", req, false, nil)
}

// ExtendLease renews req's lease like Extend and returns req.TTL; with
// req.TTL 0 the server keeps the lease's own TTL, and ExtendLease returns
// the validity the server answers: that TTL less its allowance for clock
// drift.
func (s *Store) ExtendLease(ctx context.Context, req store.Request) (time.Duration, error) {
	var out struct {
		TTLMs int64 `json:"ttlMs"`
	}
	if err := s.tokenOp(ctx, "extend", req, true, &out); err != nil {
		return 0, err
	}
	if req.TTL != 0 || out.TTLMs == 0 {
		return req.TTL, nil
	}
	return time.Duration(out.TTLMs) * time.Millisecond, nil
}

func (s *Store) tokenOp(ctx context.Context, op string, req store.Request, ttl bool, out any) error {
	if err := checkMode(req.Mode); err != nil {
		return err
	}
	body := tokenBody{Token: req.Token}
	if ttl {
		body.TTLMs = req.TTL.Milliseconds()
	}
	status, er, _, err := s.do(ctx, http.MethodPost, lockPath(req.Name, op), body, out)
	if err != nil {
		return &store.StoreError{Op: op, Node: -1, Err: err}
	}
	switch status {
	case http.StatusOK, http.StatusNoContent:
		return nil
	case http.StatusGone, http.StatusNotFound, http.StatusConflict:
		return store.ErrNotHeld
	}
	return s.statusError(op, status, er)
}

type stateReply struct {
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Holders int    `json:"holders"`
	TTLMs   int64  `json:"ttlMs"`
	Fence   int64  `json:"fence"`
	Queue   int    `json:"queue"`
	Limit   int    `json:"limit"`
	Owners  []struct {
		Owner string `json:"owner"`
		Since int64  `json:"since"`
		Data  string `json:"data"`
		Fence int64  `json:"fence"`
	} `json:"owners"`
}

func (r stateReply) state() store.State {
	m, ok := store.ParseMode(r.Mode)
	if !ok {
		switch r.Mode {
		case "exclusive":
			m = store.ModeMutex
		case "shared":
			m = store.ModeSemaphore
		}
	}
	st := store.State{Name: r.Name, Mode: m, Holders: r.Holders, TTL: time.Duration(r.TTLMs) * time.Millisecond,
		Fence: r.Fence, Queue: r.Queue, Limit: r.Limit, Owners: make([]store.Holder, len(r.Owners))}
	for i, o := range r.Owners {
		st.Owners[i] = store.Holder{Owner: o.Owner, Data: o.Data, Fence: o.Fence}
		if o.Since != 0 {
			st.Owners[i].Since = time.UnixMilli(o.Since)
		}
	}
	return st
}

// ForceRelease implements [store.ForceReleaser]: the server's
// force-release, which needs an admin credential with an auth file.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	var r struct {
		Ended []struct {
			Owner string `json:"owner"`
			Since int64  `json:"since"`
			Data  string `json:"data"`
			Fence int64  `json:"fence"`
		} `json:"ended"`
	}
	status, er, _, err := s.do(ctx, http.MethodPost, lockPath(name, "force-release"), struct{}{}, &r)
	if err != nil {
		return nil, &store.StoreError{Op: "force-release", Node: -1, Err: err}
	}
	if status != http.StatusOK {
		return nil, s.statusError("force-release", status, er)
	}
	out := make([]store.Holder, len(r.Ended))
	for i, o := range r.Ended {
		out[i] = store.Holder{Owner: o.Owner, Data: o.Data, Fence: o.Fence}
		if o.Since != 0 {
			out[i].Since = time.UnixMilli(o.Since)
		}
	}
	return out, nil
}

// State implements [store.Inspector].
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	var r stateReply
	status, er, _, err := s.do(ctx, http.MethodGet, lockPath(name, ""), nil, &r)
	if err != nil {
		return store.State{}, &store.StoreError{Op: "state", Node: -1, Err: err}
	}
	if status != http.StatusOK {
		return store.State{}, s.statusError("state", status, er)
	}
	st := r.state()
	if st.Name == "" {
		st.Name = name
	}
	return st, nil
}

// List implements [store.Inspector]. It accepts either a JSON array of
// states or an object with a "locks" array.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	var raw json.RawMessage
	status, er, _, err := s.do(ctx, http.MethodGet, "/v1/locks", nil, &raw)
	if err != nil {
		return nil, &store.StoreError{Op: "list", Node: -1, Err: err}
	}
	if status != http.StatusOK {
		return nil, s.statusError("list", status, er)
	}
	var rs []stateReply
	if err := json.Unmarshal(raw, &rs); err != nil {
		var wrapped struct {
			Locks []stateReply `json:"locks"`
		}
		if err := json.Unmarshal(raw, &wrapped); err != nil {
			return nil, &store.StoreError{Op: "list", Node: -1, Err: fmt.Errorf("bad reply: %v", err)}
		}
		rs = wrapped.Locks
	}
	out := make([]store.State, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.state())
	}
	return out, nil
}

// Ping implements [store.Pinger]: GET /health must answer 200.
func (s *Store) Ping(ctx context.Context) error {
	status, er, _, err := s.do(ctx, http.MethodGet, "/health", nil, nil)
	if err != nil {
		return &store.StoreError{Op: "ping", Node: -1, Err: err}
	}
	if status != http.StatusOK {
		return s.statusError("ping", status, er)
	}
	return nil
}

// statusError turns an unexpected status into an error: 400 is an
// [*store.InvalidError], 401 and 403 an [*store.InvalidError] about the
// auth token (a 401 without one says the server requires it), 501 wraps [store.ErrNotSupported] (the server's store cannot
// do it), anything else is a [*store.StoreError] (wrapping
// [store.ErrNoQuorum] when the server says so).
func (s *Store) statusError(op string, status int, er errorReply) error {
	msg := er.Error
	if er.Message != "" {
		msg = strings.TrimSpace(msg + ": " + er.Message)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	switch {
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge:
		field := er.Field
		if field == "" {
			field = "request"
		}
		return &store.InvalidError{Field: field, Reason: fmt.Sprintf("server said %d %s", status, msg)}
	case status == http.StatusUnauthorized && s.auth == "":
		return &authRequiredError{said: fmt.Sprintf("%d %s", status, msg), cert: s.clientCert()}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// Without a token, what the server refused is the client
		// certificate (its message names the certificate's identity).
		field := "auth token"
		if s.auth == "" {
			field = "credentials"
		}
		return &store.InvalidError{Field: field, Reason: fmt.Sprintf("server said %d %s", status, msg)}
	case status == http.StatusNotImplemented:
		return fmt.Errorf("%w: server said %d %s", store.ErrNotSupported, status, msg)
	case status == http.StatusServiceUnavailable && strings.Contains(strings.ToLower(msg), "quorum"):
		return &store.StoreError{Op: op, Node: -1, Err: fmt.Errorf("%w: server said %d %s", store.ErrNoQuorum, status, msg)}
	}
	return &store.StoreError{Op: op, Node: -1, Err: fmt.Errorf("server said %d %s", status, msg)}
}

// authRequiredError is a 401 to a client that sent no token at all: with a
// client certificate, the server refused the certificate's credentials (its
// message names the certificate's identity); without one, it wants a token.
// It wraps [store.ErrInvalid], like a wrong token's error.
type authRequiredError struct {
	said string
	cert bool // a client certificate was offered
}

func (e *authRequiredError) Error() string {
	if e.cert {
		return "dlock: the server refused the credentials (the client certificate, no auth token); it said " + e.said
	}
	return "dlock: the server requires --auth-token (env DLOCK_AUTH_TOKEN); it said " + e.said
}

// clientCert reports whether the Store offers a client certificate.
func (s *Store) clientCert() bool {
	return s.tlsc != nil && len(s.tlsc.Certificates) > 0
}

func (e *authRequiredError) Unwrap() error { return store.ErrInvalid }

// url returns the URL of path, an escaped path below the base URL.
func (s *Store) url(path string) string {
	u := *s.base
	u.Path, u.RawPath = "", ""
	return u.String() + s.base.EscapedPath() + path
}

// lockPath returns the escaped path of a lock's resource.
func lockPath(name, op string) string {
	p := "/v1/locks/" + url.PathEscape(name)
	if op != "" {
		p += "/" + op
	}
	return p
}

// do sends one request. It returns the status, the decoded error body for
// statuses other than 2xx, the headers, and a transport error. A 2xx body
// is decoded into out when out is not nil.
func (s *Store) do(ctx context.Context, method, path string, in, out any) (int, errorReply, http.Header, error) {
	var er errorReply
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, er, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url(path), rd)
	if err != nil {
		return 0, er, nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", s.ua)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.auth != "" {
		req.Header.Set("Authorization", "Bearer "+s.auth)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, er, nil, s.redact(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return 0, er, nil, err
	}
	if resp.StatusCode/100 == 2 {
		if out != nil && len(body) > 0 {
			if err := json.Unmarshal(body, out); err != nil {
				return 0, er, nil, fmt.Errorf("bad reply to %s %s: %v", method, path, err)
			}
		}
	} else {
		_ = json.Unmarshal(body, &er) // best effort: the status alone decides
	}
	return resp.StatusCode, er, resp.Header, nil
}

// redact replaces the request URL in a transport error with the server's
// base URL: the path names a lock, and the error ends up in logs.
func (s *Store) redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", strings.ToLower(ue.Op), s.base.Redacted(), ue.Err)
	}
	return err
}
