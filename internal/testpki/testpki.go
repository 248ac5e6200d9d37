// Package testpki makes the certificates tests need: a CA, and node certificates it
// signs, valid, expired or for other names, written as the PEM files a node reads.
// It is for tests only; ECDSA P-256 keys keep it fast.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a self-signed CA valid from a week ago for a day more: as a real CA, it
// was there before the certificates it signs, expired ones included.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-7 * 24 * time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Leaf describes a node certificate.
type Leaf struct {
	DNSNames  []string
	NotBefore time.Time // zero: an hour ago
	NotAfter  time.Time // zero: in a day
}

// Issue signs a certificate for l (server and client auth) and returns its PEM
// and its key's.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(24 * time.Hour)
	}
	cn := ""
	if len(l.DNSNames) > 0 {
		cn = l.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     l.DNSNames,
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Files are a node's three PEM files in a directory, named as cert-manager names
// them.
type Files struct{ Cert, Key, CA string }

// Write issues a certificate for l and writes it, its key and the bundle (the
// concatenated PEM of cas) into dir, replacing what is there (each file by a rename,
// as Kubernetes updates a mounted secret).
func (ca *CA) Write(dir string, l Leaf, bundle ...*CA) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(l)
	if err != nil {
		return Files{}, err
	}
	var caPEM []byte
	for _, c := range bundle {
		caPEM = append(caPEM, c.PEM...)
	}
	f := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	for _, w := range []struct {
		path string
		b    []byte
	}{{f.Key, keyPEM}, {f.Cert, certPEM}, {f.CA, caPEM}} {
		if err := writeAtomic(w.path, w.b); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// serial is a random 62-bit serial number: unique enough for tests, no state.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Must panics on err; for test setup.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("testpki: %v", err))
	}
	return v
}

// Must2 is Must for two values.
func Must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(fmt.Sprintf("testpki: %v", err))
	}
	return a, b
}
