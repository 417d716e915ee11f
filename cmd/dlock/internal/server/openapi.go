package server

import (
	_ "embed"
	"net/http"
	"sync"
)

// openapiJSON is the OpenAPI 3.1 contract of the /v1, /api and /health
// endpoints, served at GET /openapi.json. The package's tests check it
// against the routes the server registers and the responses it writes.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(openapiJSON)
}

// routeMux is the server's ServeMux, which also records the patterns
// registered on it, so that the routes served can be checked against the
// OpenAPI document.
type routeMux struct {
	*http.ServeMux
	// wrap, when set, wraps each handler registered after it is set (the
	// server's scope guard).
	wrap     func(pattern string, h http.Handler) http.Handler
	mu       sync.Mutex
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.record(pattern)
	if m.wrap != nil {
		h = m.wrap(pattern, h)
	}
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

func (m *routeMux) record(pattern string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.patterns = append(m.patterns, pattern)
}

// patterns returns the patterns the server serves
// ("POST /v1/locks/{name}/acquire"), in registration order.
func (s *Server) patterns() []string {
	s.mux.mu.Lock()
	defer s.mux.mu.Unlock()
	return append([]string(nil), s.mux.patterns...)
}
