package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// An operator's force-release: POST /v1/locks/{name}/force-release ends
// every hold of a name without its token (store.ForceReleaser). With an
// auth file it needs a credential of admin access (scopes.go). Each one is
// logged and sent as a "forced" lock event naming who forced and who held.

// forcedBody is the answer to a force-release: the holds it ended.
type forcedBody struct {
	Name  string      `json:"name"`
	By    string      `json:"by"`
	Ended []ownerBody `json:"ended"`
}

func (s *Server) handleForceRelease(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if e := decodeJSON(r.Body, &struct{}{}, true); e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	if err := dlock.ValidName(name); err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	// The holds are ended even when the client goes away meanwhile, so
	// the event and the log line are not lost with it.
	ctx = context.WithoutCancel(ctx)
	mode := modeName(dlock.ModeMutex) // of the holds ended, as the state said just before (a foreign key: mutex)
	if in, ok := s.locker.Store().(store.Inspector); ok {
		if st, err := in.State(ctx, name); err == nil && st.Holders > 0 {
			mode = modeName(st.Mode)
		}
	}
	// The server's own /v1 leases on name end at once (lost).
	ended, err := s.v1.ForceRelease(ctx, name)
	if errors.Is(err, dlock.ErrNotSupported) {
		writeError(w, http.StatusNotImplemented, "not supported", "the store cannot force-release a lock")
		return
	}
	if err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	by := defaultHolder(r)
	s.forced(name, mode, by, ended)
	writeJSON(w, http.StatusOK, forcedBody{Name: name, By: by, Ended: toOwners(ended, time.Now())})
}

// forced logs the force-release of name by by, which ended the holds
// ended (of mode), and sends it to the event streams and the other
// replicas.
func (s *Server) forced(name, mode, by string, ended []store.Holder) {
	owners := make([]string, len(ended))
	fences := make([]int64, len(ended))
	for i, h := range ended {
		owners[i], fences[i] = h.Owner, h.Fence
	}
	s.log.Warn("dlock: lock force-released", "name", name, "by", by, "owners", owners, "fences", fences)
	if len(ended) == 0 {
		return // nothing ended: nothing happened to the lock
	}
	s.emit(eventBody{Type: "forced", Name: name, Mode: mode, Time: time.Now().UnixMilli(), Replica: s.rep.ID(),
		By: by, Owners: owners}, true)
}
