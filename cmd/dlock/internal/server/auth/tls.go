package auth

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS on the listener (server.Config.TLSCert, TLSKey and ClientCA;
// docs/operations.md): TLS 1.2 at least, the standard library's cipher
// suites, HTTP/2 offered by ALPN. The certificate, its key and the client
// CA are read by NewTLS and again by Reload (SIGHUP in dlock serve); a
// handshake uses whatever is in force when it starts, so connections open
// at a reload keep going and new ones see the new certificate.

// TLS is the listener's TLS material, read again by Reload.
type TLS struct {
	certFile, keyFile, caFile string

	mu   sync.Mutex                 // serialises loads
	conf atomic.Pointer[tls.Config] // the config of the next handshake
	cert atomic.Pointer[tls.Certificate]
}

// NewTLS loads a PEM certificate chain, its key and, when caFile is set,
// the CAs of the client certificates every handshake then requires; it
// returns nil when all three are empty (no TLS).
func NewTLS(certFile, keyFile, caFile string) (*TLS, error) {
	switch {
	case certFile == "" && keyFile == "" && caFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("dlock: server: a TLS certificate and its key go together: set both")
	}
	st := &TLS{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := st.load(time.Now()); err != nil {
		return nil, err
	}
	return st, nil
}

// load reads the certificate, the key and the client CA, and makes them
// the ones of the next handshake. On any error nothing changes.
func (st *TLS) load(now time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	cert, err := loadCertificate(st.certFile, st.keyFile, now)
	if err != nil {
		return err
	}
	conf := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: st.certificate,
	}
	if st.caFile != "" {
		pool, err := loadCertPool(st.caFile)
		if err != nil {
			return err
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// Fresh session ticket keys: a session of before the reload cannot be
	// resumed past it, so a client certificate verified under a client CA
	// no longer in force is asked for and verified again.
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("dlock: TLS session ticket key: %w", err)
	}
	conf.SetSessionTicketKeys([][32]byte{key})
	st.cert.Store(cert)
	st.conf.Store(conf)
	return nil
}

func (st *TLS) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return st.cert.Load(), nil
}

// ServerConfig is the http.Server's TLS config: each handshake takes the
// config in force when it starts.
func (st *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: st.certificate,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return st.conf.Load(), nil
		},
	}
}

// loadCertificate reads a PEM certificate chain and its key, and refuses
// a leaf that is expired or not yet valid at now.
func loadCertificate(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("dlock: TLS certificate %s with key %s: %w", certFile, keyFile, err)
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("dlock: TLS certificate %s: %w", certFile, err)
		}
		c.Leaf = leaf
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("dlock: TLS certificate %s expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("dlock: TLS certificate %s is not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return &c, nil
}

// loadCertPool reads the PEM certificates of a CA file.
func loadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file) //nolint:gosec // G304: the operator names this file (--client-ca)
	if err != nil {
		return nil, fmt.Errorf("dlock: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("dlock: client CA %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// Reload reads the certificate, its key and the client CA again, and
// returns the new leaf. Handshakes from then on use them; open connections
// are kept. A file that cannot be read, a key that does not match, or a
// certificate that is expired or not yet valid is an error, and the
// previous material stays in force.
func (st *TLS) Reload() (*x509.Certificate, error) {
	if err := st.load(time.Now()); err != nil {
		return nil, err
	}
	return st.cert.Load().Leaf, nil
}

// HasClientCA reports whether handshakes require a client certificate.
func (st *TLS) HasClientCA() bool { return st.caFile != "" }
