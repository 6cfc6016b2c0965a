package harness

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func parseCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemData)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", pemData)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCAIssuesVerifiableCertificates(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("CA certificate: IsCA=%v CN=%q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	tests := []struct {
		name  string
		spec  CertSpec
		usage x509.ExtKeyUsage
		host  string // verified as a serving name when set
	}{
		{"serving by IP", CertSpec{CommonName: "kube-apiserver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"kubernetes.default"}, Server: true},
			x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"serving by name", CertSpec{CommonName: "kube-apiserver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"kubernetes.default"}, Server: true},
			x509.ExtKeyUsageServerAuth, "kubernetes.default"},
		{"client with groups", CertSpec{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, Client: true},
			x509.ExtKeyUsageClientAuth, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := ca.Issue(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
				t.Fatalf("certificate and key do not match: %v", err)
			}
			c := parseCert(t, kp.CertPEM)
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if c.Subject.CommonName != tt.spec.CommonName || !slices.Equal(c.Subject.Organization, tt.spec.Organizations) {
				t.Errorf("subject %v, want CN %q O %v", c.Subject, tt.spec.CommonName, tt.spec.Organizations)
			}
			if tt.spec.Client && slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
				t.Errorf("a client-only certificate may serve: %v", c.ExtKeyUsage)
			}
		})
	}
}

func TestCAIssueRefusesIncompleteSpecs(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]CertSpec{
		"no common name":       {Client: true},
		"no usage":             {CommonName: "x"},
		"serving without host": {CommonName: "x", Server: true},
	} {
		if _, err := ca.Issue(spec); err == nil {
			t.Errorf("%s: Issue(%+v) succeeded", name, spec)
		}
	}
	if _, err := NewCA(""); err == nil {
		t.Error("NewCA(\"\") succeeded")
	}
}

func TestServiceAccountKeyPair(t *testing.T) {
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(pub)
	if pb == nil || pb.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM: %q", pub)
	}
	pubKey, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(priv)
	if kb == nil {
		t.Fatalf("private key PEM: %q", priv)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(pubKey) {
		t.Error("the public key is not the private key's")
	}
}

func TestWriteKeyPairModes(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(CertSpec{CommonName: "c", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath, err := WriteKeyPair(dir, "c", kp)
	if err != nil {
		t.Fatal(err)
	}
	if certPath != filepath.Join(dir, "c.crt") || keyPath != filepath.Join(dir, "c.key") {
		t.Errorf("paths %s %s", certPath, keyPath)
	}
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Error(err)
	}
}

func TestKubeconfig(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(CertSpec{CommonName: "admin", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	text, err := Kubeconfig("https://127.0.0.1:6443", "admin", ca.CertPEM, kp)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	for _, want := range []string{
		`server: "https://127.0.0.1:6443"`,
		"certificate-authority-data: " + b64(ca.CertPEM),
		"client-certificate-data: " + b64(kp.CertPEM),
		"client-key-data: " + b64(kp.KeyPEM),
		"current-context: netshim-test",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, text)
		}
	}

	bad := []struct {
		name, server, user string
		ca                 []byte
		kp                 KeyPair
	}{
		{"plain http", "http://127.0.0.1:6443", "admin", ca.CertPEM, kp},
		{"no user", "https://127.0.0.1:6443", "", ca.CertPEM, kp},
		{"quote in user", "https://127.0.0.1:6443", `a"b`, ca.CertPEM, kp},
		{"no CA", "https://127.0.0.1:6443", "admin", nil, kp},
		{"no key", "https://127.0.0.1:6443", "admin", ca.CertPEM, KeyPair{CertPEM: kp.CertPEM}},
	}
	for _, tt := range bad {
		if _, err := Kubeconfig(tt.server, tt.user, tt.ca, tt.kp); err == nil {
			t.Errorf("%s: Kubeconfig succeeded", tt.name)
		}
	}
}
