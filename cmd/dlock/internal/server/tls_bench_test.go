package server

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireReleaseTLS is acquire+release over plain HTTP, HTTPS
// (HTTP/1.1) and HTTPS (HTTP/2), in one run: 16 clients on the memory
// store, each with its own lock, through Serve on a loopback port with
// keep-alive connections (16 handshakes per run, then none). Client and
// server share the process: cpu-ns/op is both sides.
// One op is one acquire and one release.
//
//	go test -run '^$' -bench AcquireReleaseTLS -count 3 ./internal/server
func BenchmarkAcquireReleaseTLS(b *testing.B) {
	p := newPKI(b)
	for _, mode := range []string{"http", "https-h1", "https-h2"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{}
			if mode != "http" {
				cfg.TLSCert, cfg.TLSKey = p.certFile, p.keyOut
			}
			s := startTLS(b, cfg)
			base := s.base
			tr := &http.Transport{MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: mode == "https-h2"}
			if mode == "http" {
				base = "http" + base[len("https"):]
			} else {
				tr.TLSClientConfig = &tls.Config{RootCAs: p.ca.Pool()}
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			var ids atomic.Int64
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			done := reportCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench-%s-%d", mode, ids.Add(1))
				for pb.Next() {
					r, err := call(c, "POST", base+"/v1/locks/"+name+"/acquire", `{"ttlMs":30000}`)
					if err != nil || r.code != 200 {
						b.Errorf("acquire: %d %v", r.code, err)
						return
					}
					if r, err = call(c, "POST", base+"/v1/locks/"+name+"/release", `{"token":"`+r.body["token"].(string)+`"}`); err != nil || r.code != 200 {
						b.Errorf("release: %d %v", r.code, err)
						return
					}
				}
			})
			done()
		})
	}
}
