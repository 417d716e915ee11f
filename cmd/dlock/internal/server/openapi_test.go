package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/dlock-dev/dlock/store/memory"
)

// The contract tests: the embedded OpenAPI document is valid, lists every
// route the server registers (and nothing else), every response the
// handler tests provoke validates against it, and every request body the
// server accepted matches the request schema. newEnv wraps each test
// server's handler in checkContract, so every handler test above checks
// the contract as it runs.

// uncontracted are the routes outside the OpenAPI document: Prometheus
// text and the dashboard's files.
var uncontracted = []string{"GET /metrics", "GET /{$}", "GET /static/{file...}"}

// The event stream is text whose frames validateEventStream checks.
func init() { openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder) }

var contractDoc = sync.OnceValues(func() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapiJSON)
	if err != nil {
		return nil, fmt.Errorf("loading openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
	}
	return doc, nil
})

func loadContract(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// contractRoute returns the document's operation for a mux pattern such as
// "POST /v1/locks/{name}/acquire" (the server's path patterns are written
// as OpenAPI paths), or nil.
func contractRoute(doc *openapi3.T, pattern string) *routers.Route {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		return nil
	}
	item := doc.Paths.Value(path)
	if item == nil {
		return nil
	}
	op := item.GetOperation(method)
	if op == nil {
		return nil
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
}

// checkContract wraps h so that every response it writes is validated
// against the OpenAPI document with kin-openapi's openapi3filter
// (statuses, headers, bodies); failures are errors of t.
func checkContract(t *testing.T, srv *Server, h http.Handler) http.Handler {
	doc := loadContract(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &contractWriter{ResponseWriter: w}
		// The request as it arrived (the handler consumes its body).
		req := r.Clone(context.WithoutCancel(r.Context()))
		reqBody, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("contract: %s %s: reading the request body: %v", r.Method, r.URL.RequestURI(), err)
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		h.ServeHTTP(cw, r)
		if err := validateAgainst(doc, srv, req, cw.status(), w.Header(), cw.body.Bytes(), cw.overflow); err != nil {
			t.Errorf("contract: %s %s: %v", r.Method, r.URL.RequestURI(), err)
		}
		if cw.status() == http.StatusOK {
			if err := validateAccepted(doc, srv, req, reqBody); err != nil {
				t.Errorf("contract: %s %s: %v", r.Method, r.URL.RequestURI(), err)
			}
		}
	})
}

// validateAgainst validates one response.
func validateAgainst(doc *openapi3.T, srv *Server, r *http.Request, code int, header http.Header, body []byte, truncated bool) error {
	_, pattern := srv.mux.Handler(r)
	if slices.Contains(uncontracted, pattern) {
		return nil
	}
	if pattern == "" {
		// Unrouted (404, 405, a redirect) or refused before routing (401):
		// the document's conventions say every error is an Error.
		return validateSchema(doc, "Error", body)
	}
	route := contractRoute(doc, pattern)
	if route == nil {
		return fmt.Errorf("the server answered route %q, which the OpenAPI document lacks", pattern)
	}
	if truncated {
		return fmt.Errorf("response over %d bytes: not validated", maxRecorded)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, Route: route},
		Status:                 code,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("status %d, headers %v, body %.300s: %w", code, header, body, err)
	}
	if code == http.StatusOK && strings.HasPrefix(header.Get("Content-Type"), "text/event-stream") {
		return validateEventStream(doc, body)
	}
	return nil
}

// validateAccepted checks that a request body the server accepted (200)
// matches the operation's request schema: the contract must not refuse
// what the server takes.
func validateAccepted(doc *openapi3.T, srv *Server, r *http.Request, body []byte) error {
	_, pattern := srv.mux.Handler(r)
	route := contractRoute(doc, pattern)
	if route == nil || len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return fmt.Errorf("the server accepted a body %.100q, but the operation takes none", body)
	}
	mt := rb.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return errors.New("the operation's request body has no application/json schema")
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("the server accepted a body that is not JSON: %.100q", body)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsRequest()); err != nil {
		return fmt.Errorf("the server accepted body %.300s, which the request schema refuses: %w", body, err)
	}
	return nil
}

// validateEventStream validates the data of each server-sent event against
// the schema the document gives its type.
func validateEventStream(doc *openapi3.T, body []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), maxRecorded)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			schema := "LockEvent"
			switch event {
			case "snapshot":
				schema = "Snapshot"
			case "shutdown":
				schema = "Shutdown"
			case "leader": // GET /v1/elections/{name}/observe
				schema = "Election"
			}
			if err := validateSchema(doc, schema, []byte(line[len("data: "):])); err != nil {
				return fmt.Errorf("event %q: %w", event, err)
			}
		}
	}
	return nil
}

func validateSchema(doc *openapi3.T, name string, body []byte) error {
	ref := doc.Components.Schemas[name]
	if ref == nil {
		return fmt.Errorf("no schema %q in the document", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("body %.300q is not JSON: %v", body, err)
	}
	if err := ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("body %.300s does not match schema %s: %w", body, name, err)
	}
	return nil
}

// maxRecorded bounds the bytes of one response kept for validation.
const maxRecorded = 4 << 20

// contractWriter passes a response through and keeps a copy.
type contractWriter struct {
	http.ResponseWriter
	code     int
	body     bytes.Buffer
	overflow bool
}

func (w *contractWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *contractWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.body.Len()+len(b) > maxRecorded {
		w.overflow = true
	} else {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *contractWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the flusher and deadlines.
func (w *contractWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestContractRoutes: every route the server registers is in the document
// (unless it is one of the few outside it), and every operation of the
// document is a route the server registers.
func TestContractRoutes(t *testing.T) {
	doc := loadContract(t)
	e := newEnv(t, memory.New(), Config{})
	registered := e.srv.patterns()
	if len(registered) == 0 {
		t.Fatal("the server registered no routes")
	}
	for _, p := range registered {
		if slices.Contains(uncontracted, p) {
			continue
		}
		if contractRoute(doc, p) == nil {
			t.Errorf("route %q is served but not in openapi.json", p)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if p := method + " " + path; !slices.Contains(registered, p) {
				t.Errorf("openapi.json has %q, which the server does not serve", p)
			}
		}
	}
	for _, p := range uncontracted {
		if !slices.Contains(registered, p) {
			t.Errorf("uncontracted route %q is not served any more: drop it from the list", p)
		}
	}
}

// TestContractServed: GET /openapi.json serves the embedded document,
// which declares OpenAPI 3.1.
func TestContractServed(t *testing.T) {
	doc := loadContract(t)
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	e := newEnv(t, memory.New(), Config{AuthToken: "s3cret-token"})
	r := e.get("/openapi.json")
	wantCode(t, "GET /openapi.json without auth", r, http.StatusOK)
	if !bytes.Equal(r.body, openapiJSON) {
		t.Errorf("GET /openapi.json served %d bytes, want the embedded %d", len(r.body), len(openapiJSON))
	}
}

// TestContractValidator shows that the validation used by checkContract
// rejects responses that break the document: a grant without its fence, a
// Retry-After that is not a number, an undocumented status, an unknown
// field, an event of the wrong shape.
func TestContractValidator(t *testing.T) {
	doc := loadContract(t)
	e := newEnv(t, memory.New(), Config{})
	req := httptest.NewRequest(http.MethodPost, "/v1/locks/x/acquire", nil)
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	grant := `{"name":"x","token":"` + strings.Repeat("ab", 16) + `","fence":7,"ttlMs":1000,"mode":"mutex","count":1}`
	if err := validateAgainst(doc, e.srv, req, 200, jsonHeader(), []byte(grant), false); err != nil {
		t.Fatalf("a good grant was rejected: %v", err)
	}
	locked := `{"error":"locked","message":"held","retryAfterMs":900,"heldMode":"mutex"}`
	if err := validateAgainst(doc, e.srv, req, 409, jsonHeader("Retry-After", "1"), []byte(locked), false); err != nil {
		t.Fatalf("a good 409 was rejected: %v", err)
	}
	for _, tc := range []struct {
		what   string
		req    *http.Request
		code   int
		header http.Header
		body   string
	}{
		{"grant without fence", req, 200, jsonHeader(), strings.Replace(grant, `"fence":7,`, "", 1)},
		{"grant with an unknown field", req, 200, jsonHeader(), strings.Replace(grant, `"count":1`, `"count":1,"extra":1`, 1)},
		{"grant of an unknown mode", req, 200, jsonHeader(), strings.Replace(grant, `"mutex"`, `"spinlock"`, 1)},
		{"409 with Retry-After 0", req, 409, jsonHeader("Retry-After", "0"), locked},
		{"409 with Retry-After not a number", req, 409, jsonHeader("Retry-After", "soon"), locked},
		{"undocumented status", req, 418, jsonHeader(), locked},
		{"429 without Retry-After", req, 429, jsonHeader(), `{"error":"rate limited","message":"slow down","retryAfterMs":900}`},
		{"text body", req, 200, http.Header{"Content-Type": {"text/plain"}}, "ok"},
		{"401 without WWW-Authenticate", req, 401, jsonHeader(), `{"error":"unauthorized","message":"no"}`},
		{"error without message", httptest.NewRequest(http.MethodGet, "/nope", nil), 404, jsonHeader(), `{"error":"not found"}`},
		{"bad snapshot", httptest.NewRequest(http.MethodGet, "/v1/events", nil), 200,
			http.Header{"Content-Type": {"text/event-stream"}}, "retry: 2000\n\nevent: snapshot\ndata: {\"time\":1}\n\n"},
		{"event with a token", httptest.NewRequest(http.MethodGet, "/v1/events", nil), 200,
			http.Header{"Content-Type": {"text/event-stream"}}, "event: acquire\ndata: {\"type\":\"acquire\",\"name\":\"x\",\"mode\":\"mutex\",\"durationMs\":1,\"time\":1,\"replica\":\"r\",\"token\":\"ab\"}\n\n"},
	} {
		err := validateAgainst(doc, e.srv, tc.req, tc.code, tc.header, []byte(tc.body), false)
		if err == nil {
			t.Errorf("%s: validated, want an error", tc.what)
			continue
		}
		t.Logf("%s: %.200v", tc.what, err)
	}
}
