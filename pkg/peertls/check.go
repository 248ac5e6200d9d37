package peertls

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// NotValidError: the certificate is expired, or not valid yet. It is the one failed
// check that time or a renewal fixes with no change to the node, so Open takes such
// a certificate and Valid reports it; a reload refuses it.
type NotValidError struct {
	Cert                string // the certificate's file
	NotBefore, NotAfter time.Time
	Now                 time.Time
}

func (e *NotValidError) Error() string {
	if e.Now.After(e.NotAfter) {
		return fmt.Sprintf("certificate %s expired at %s (%s ago), and every peer refuses it: write a renewed one",
			e.Cert, e.NotAfter.UTC().Format(time.RFC3339), e.Now.Sub(e.NotAfter).Round(time.Second))
	}
	return fmt.Sprintf("certificate %s is valid from %s (in %s), and every peer refuses it until then: check the clocks of this host and of the issuer",
		e.Cert, e.NotBefore.UTC().Format(time.RFC3339), e.NotBefore.Sub(e.Now).Round(time.Second))
}

// WrongNodeError: the certificate does not name Config.NodeID. Peers would refuse
// this node's events, which they take only under the identities of its certificate.
type WrongNodeError struct {
	Cert   string   // the certificate's file
	IDs    []string // the node ids it names
	NodeID string   // this node's id
}

func (e *WrongNodeError) Error() string {
	return fmt.Sprintf("certificate %s names node %s (the first label of its DNS names), not this node's id %q",
		e.Cert, strings.Join(e.IDs, " or "), e.NodeID)
}

// checkOwn checks that m is an identity this node can use, whatever the time: it
// names the node, and its certificate chains to its own CA bundle for both the
// server and the client side of a peer connection (the checks its peers, which
// trust the same CA, make at every handshake).
func (c *Config) checkOwn(m *material) error {
	if c.NodeID != "" && !slices.Contains(m.ids, c.NodeID) {
		return &WrongNodeError{Cert: c.Files.Cert, IDs: m.ids, NodeID: c.NodeID}
	}
	leaf := m.cert.Leaf
	inter := x509.NewCertPool()
	for _, der := range m.cert.Certificate[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("certificate %s: an intermediate certificate: %w", c.Files.Cert, err)
		}
		inter.AddCert(ic)
	}
	// Validity is checked apart (validNow), so the chain is checked at a moment the
	// leaf is valid: an expired certificate from the right CA is "expired", not
	// "signed by unknown authority".
	at := c.Now()
	if at.After(leaf.NotAfter) {
		at = leaf.NotAfter
	}
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.roots, Intermediates: inter, CurrentTime: at,
			KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("certificate %s does not chain to the CA bundle %s (peers trusting that bundle would refuse it): %w",
				c.Files.Cert, c.Files.CA, err)
		}
	}
	return nil
}

// validNow checks that m's certificate, read from file, is valid at now (a
// *NotValidError if not).
func validNow(m *material, file string, now time.Time) error {
	leaf := m.cert.Leaf
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return &NotValidError{Cert: file, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, Now: now}
	}
	return nil
}
