// Command mkcerts writes the certificates of the Python and JS clients'
// TLS tests into a directory (made with crypto/x509 by package tlstest):
//
//	ca.pem                      the private CA the server's and clients' certificates come from
//	server.pem, server-key.pem  for 127.0.0.1, ::1 and localhost
//	team-a.pem, team-a-key.pem  URI SAN spiffe://dlock.test/team-a
//	reader.pem, reader-key.pem  URI SAN spiffe://dlock.test/reader
//	other-ca.pem                another CA
//	stranger.pem, stranger-key.pem  from the other CA, URI SAN spiffe://dlock.test/team-a
//
// Usage: go run ./internal/tlstest/mkcerts DIR
package main

import (
	"fmt"
	"os"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/tlstest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkcerts DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "mkcerts:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	ca, err := tlstest.NewCA("dlock test CA")
	if err != nil {
		return err
	}
	other, err := tlstest.NewCA("another CA")
	if err != nil {
		return err
	}
	if _, err := ca.WriteFile(dir, "ca"); err != nil {
		return err
	}
	if _, err := other.WriteFile(dir, "other-ca"); err != nil {
		return err
	}
	srv, err := ca.Server()
	if err != nil {
		return err
	}
	if _, _, err := srv.WriteFiles(dir, "server"); err != nil {
		return err
	}
	for _, c := range []struct {
		ca   *tlstest.CA
		name string
		uri  string
	}{
		{ca, "team-a", "spiffe://dlock.test/team-a"},
		{ca, "reader", "spiffe://dlock.test/reader"},
		{other, "stranger", "spiffe://dlock.test/team-a"},
	} {
		p, err := c.ca.Issue(tlstest.Leaf{CN: c.name, URIs: []string{c.uri}})
		if err != nil {
			return err
		}
		if _, _, err := p.WriteFiles(dir, c.name); err != nil {
			return err
		}
	}
	return nil
}
