package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a TLS member: its CA, and a client
// certificate and key that CA signed.
type TLSFiles struct {
	CACert, ClientCert, ClientKey string
	// StrangerCert and StrangerKey are a client identity signed by
	// another CA, which the member does not trust.
	StrangerCert, StrangerKey string
	// ExpiredCert and ExpiredKey are a client identity the member's CA
	// signed, whose validity ended an hour ago.
	ExpiredCert, ExpiredKey string
	serverCert, serverKey   string
}

// StartTLS starts a single member that serves clients over TLS only and
// requires a client certificate signed by its CA (made for the test, in
// the test's temporary directory).
func StartTLS(t testing.TB) (*Cluster, TLSFiles) {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CACert: filepath.Join(dir, "ca.pem"), ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem"),
		StrangerCert: filepath.Join(dir, "stranger.pem"), StrangerKey: filepath.Join(dir, "stranger-key.pem"),
		ExpiredCert: filepath.Join(dir, "expired.pem"), ExpiredKey: filepath.Join(dir, "expired-key.pem"),
	}
	now := time.Now()
	caKey, caCert, caDER := newCert(t, "claimstore test CA", nil, nil, true)
	writePEM(t, f.CACert, "CERTIFICATE", caDER)
	sKey, _, sDER := newCert(t, "127.0.0.1", caCert, caKey, false)
	writePEM(t, f.serverCert, "CERTIFICATE", sDER)
	writeKey(t, f.serverKey, sKey)
	cKey, _, cDER := newCert(t, "claimstore test client", caCert, caKey, false)
	writePEM(t, f.ClientCert, "CERTIFICATE", cDER)
	writeKey(t, f.ClientKey, cKey)
	oCAKey, oCACert, _ := newCert(t, "another CA", nil, nil, true)
	oKey, _, oDER := newCert(t, "claimstore test stranger", oCACert, oCAKey, false)
	writePEM(t, f.StrangerCert, "CERTIFICATE", oDER)
	writeKey(t, f.StrangerKey, oKey)
	eKey, _, eDER := newCertValid(t, "claimstore test expired", caCert, caKey, false, now.Add(-48*time.Hour), now.Add(-time.Hour))
	writePEM(t, f.ExpiredCert, "CERTIFICATE", eDER)
	writeKey(t, f.ExpiredKey, eKey)
	c := startWith(t, 1, &f, 0)
	return c, f
}

func newCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	return newCertValid(t, cn, parent, parentKey, ca, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

func newCertValid(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool, notBefore, notAfter time.Time) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t testing.TB, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}
