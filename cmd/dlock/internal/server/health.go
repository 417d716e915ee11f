package server

import (
	"context"
	"io/fs"
	"net/http"
	"path"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/dashboard"
	"github.com/dlock-dev/dlock/store"
)

type healthBody struct {
	Status  string `json:"status"`
	Service string `json:"service"`
	Store   string `json:"store"`
	Version string `json:"version"`
	UptimeS int64  `json:"uptimeS"`
	// Only when unhealthy:
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// handleHealth checks the store with a ping (or, for a store that cannot
// ping, a state query) and answers 200 or 503.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var err error
	switch st := s.locker.Store().(type) {
	case store.Pinger:
		err = st.Ping(ctx)
	case store.Inspector:
		_, err = st.State(ctx, "dlock-health")
	}
	b := healthBody{Status: "ok", Service: "distributed-lock", Store: s.cfg.StoreName, Version: s.cfg.Version,
		UptimeS: int64(time.Since(s.life.started).Seconds())}
	code := http.StatusOK
	if err != nil {
		code = http.StatusServiceUnavailable
		b.Status, b.Error, b.Message = "unavailable", "store unavailable", err.Error()
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, b)
}

func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	s.serveAsset(w, r, "index.html")
}

func (s *Server) handleStatic(w http.ResponseWriter, r *http.Request) {
	s.serveAsset(w, r, r.PathValue("file"))
}

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	name = path.Clean(name)
	fsys := dashboard.FS()
	if !fs.ValidPath(name) {
		writeError(w, http.StatusNotFound, "not found", "no such file")
		return
	}
	if st, err := fs.Stat(fsys, name); err != nil || st.IsDir() {
		writeError(w, http.StatusNotFound, "not found", "no such file")
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, fsys, name) //nolint:gosec // G703: name passed fs.ValidPath and fsys is the embedded dashboard, not the disk
}
