package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dlock-dev/dlock"
)

// serveTLSFlags are the listener's TLS flags of dlock serve.
type serveTLSFlags struct {
	cert, key, clientCA string
}

func (t *serveTLSFlags) register(fs *flagSet) {
	fs.String(&t.cert, "tls-cert", "PATH", "DLOCK_TLS_CERT", "",
		"PEM certificate chain: serve HTTPS (TLS 1.2+, HTTP/2); reread on SIGHUP (docs/operations.md)")
	fs.String(&t.key, "tls-key", "PATH", "DLOCK_TLS_KEY", "",
		"PEM private key of --tls-cert; reread on SIGHUP")
	fs.String(&t.clientCA, "client-ca", "PATH", "DLOCK_CLIENT_CA", "",
		"PEM CA certificates: require and verify client certificates (mutual TLS); reread on SIGHUP")
}

// check validates the combination of the flags.
func (t *serveTLSFlags) check() error {
	if (t.cert == "") != (t.key == "") {
		return errors.New("--tls-cert and --tls-key go together: set both")
	}
	if t.clientCA != "" && t.cert == "" {
		return errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are asked for in a TLS handshake")
	}
	return nil
}

// clientTLSFlags are the TLS flags of a client of a remote dlock serve.
type clientTLSFlags struct {
	caFile, cert, key string
}

func (t *clientTLSFlags) register(fs *flagSet) {
	fs.String(&t.caFile, "ca-file", "PATH", "DLOCK_CA_FILE", "",
		"PEM CA certificates to trust for an https:// --server, instead of the system's")
	fs.String(&t.cert, "cert", "PATH", "DLOCK_CERT", "",
		"PEM client certificate for an https:// --server that asks for one (mutual TLS)")
	fs.String(&t.key, "key", "PATH", "DLOCK_KEY", "",
		"PEM private key of --cert")
}

func (t *clientTLSFlags) set() bool { return t.caFile != "" || t.cert != "" || t.key != "" }

// config returns the TLS configuration for server, nil when no flag is
// set. Errors name the flag and the file.
func (t *clientTLSFlags) config(server string) (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	if !strings.HasPrefix(strings.ToLower(server), "https://") {
		return nil, &dlock.InvalidError{Field: "server", Reason: "must be an https:// URL for --ca-file, --cert and --key"}
	}
	if (t.cert == "") != (t.key == "") {
		return nil, &dlock.InvalidError{Field: "cert", Reason: "needs --key, and --key needs --cert"}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.caFile != "" {
		data, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", t.caFile)
		}
	}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("--cert %s with --key %s: %w", t.cert, t.key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	} else {
		// A server that asks for a client certificate (dlock serve with
		// --client-ca) would otherwise end the connection after a TLS 1.3
		// handshake that looked complete, and the command would fail on a
		// bare "broken pipe" or "connection reset": fail the handshake here,
		// naming what is missing.
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, errors.New("client certificate required by the server: set --cert and --key (DLOCK_CERT, DLOCK_KEY)")
		}
	}
	return c, nil
}
