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

// first names the first TLS flag set, for errors about them.
func (t *clientTLSFlags) first() string {
	switch {
	case t.caFile != "":
		return "ca-file"
	case t.cert != "":
		return "cert"
	}
	return "key"
}

// config returns the TLS configuration for server: nil for an http://
// server without TLS flags; for every https:// server one that names the
// missing flags when the server asks for a client certificate, whether or
// not a flag is set (the system's roots, SSL_CERT_FILE included, are
// trusted without --ca-file). Errors are usage errors naming the flag and
// the file.
func (t *clientTLSFlags) config(server string) (*tls.Config, error) {
	https := strings.HasPrefix(strings.ToLower(server), "https://")
	if !t.set() && !https {
		return nil, nil
	}
	if !https {
		return nil, &dlock.InvalidError{Field: "server", Reason: "must be an https:// URL for --ca-file, --cert and --key"}
	}
	if (t.cert == "") != (t.key == "") {
		return nil, &dlock.InvalidError{Field: "cert", Reason: "needs --key, and --key needs --cert"}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.caFile != "" {
		data, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, &dlock.InvalidError{Field: "ca-file", Reason: err.Error()}
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(data) {
			return nil, &dlock.InvalidError{Field: "ca-file", Reason: t.caFile + ": no PEM certificate in it"}
		}
	}
	if t.cert != "" {
		certPEM, err := os.ReadFile(t.cert)
		if err != nil {
			return nil, &dlock.InvalidError{Field: "cert", Reason: err.Error()}
		}
		keyPEM, err := os.ReadFile(t.key)
		if err != nil {
			return nil, &dlock.InvalidError{Field: "key", Reason: err.Error()}
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			field := "cert"
			if msg := err.Error(); strings.Contains(msg, "key input") || strings.Contains(msg, "private key") {
				field = "key" // not a key, or not the key of --cert
			}
			return nil, &dlock.InvalidError{Field: field, Reason: fmt.Sprintf("--cert %s with --key %s: %v", t.cert, t.key, err)}
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
