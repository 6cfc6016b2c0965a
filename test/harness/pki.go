package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// certValidity is how long the test cluster's certificates last: a run, with
// room for a clock that is a little off.
const certValidity = 24 * time.Hour

// CA is a certificate authority of a test cluster's own: every component's
// serving and client certificates are signed by it, and every component
// trusts it (kube-apiserver's --client-ca-file, kubelet's clientCAFile, the
// kubeconfigs' certificate-authority-data).
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
	KeyPEM  []byte
}

// KeyPair is a certificate and its private key, PEM-encoded.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// CertSpec says what a certificate is for. Kubernetes reads a client
// certificate's CommonName as the user name and its Organizations as the
// groups.
type CertSpec struct {
	CommonName    string
	Organizations []string
	// DNSNames and IPs are the names a serving certificate is valid for.
	DNSNames []string
	IPs      []net.IP
	// Server and Client set the extended key usages; at least one.
	Server, Client bool
}

// newKey makes a P-256 key: quick to generate, and every Kubernetes
// component (and the service account token signer) takes ECDSA keys.
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return n, nil
}

// NewCA makes a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	if cn == "" {
		return nil, errors.New("a CA needs a common name")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &CA{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		KeyPEM:  keyPEM,
	}, nil
}

// Issue makes a key and a certificate for spec, signed by the CA.
func (ca *CA) Issue(spec CertSpec) (KeyPair, error) {
	if spec.CommonName == "" {
		return KeyPair{}, errors.New("a certificate needs a common name")
	}
	if !spec.Server && !spec.Client {
		return KeyPair{}, fmt.Errorf("certificate %q: say whether it serves, authenticates a client, or both", spec.CommonName)
	}
	if spec.Server && len(spec.DNSNames) == 0 && len(spec.IPs) == 0 {
		return KeyPair{}, fmt.Errorf("serving certificate %q names no host", spec.CommonName)
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return KeyPair{}, err
	}
	var usages []x509.ExtKeyUsage
	if spec.Server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing the certificate of %q: %w", spec.CommonName, err)
	}
	return KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// NewServiceAccountKey makes the key pair kube-apiserver signs service
// account tokens with (private) and checks them with (public), and
// kube-controller-manager signs the tokens it mints with (private).
func NewServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, privPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the service account public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// WriteKeyPair writes kp to dir/name.crt and dir/name.key (0600) and
// returns the paths.
func WriteKeyPair(dir, name string, kp KeyPair) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, kp.CertPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", certPath, err)
	}
	if err := os.WriteFile(keyPath, kp.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", keyPath, err)
	}
	return certPath, keyPath, nil
}

// Kubeconfig is the text of a kubeconfig file with one cluster (server,
// trusting caPEM), one user (a client certificate) and one context, the
// data embedded so that the file stands alone.
func Kubeconfig(server, user string, caPEM []byte, client KeyPair) (string, error) {
	if !strings.HasPrefix(server, "https://") {
		return "", fmt.Errorf("server %q: want an https:// URL", server)
	}
	if user == "" || strings.ContainsAny(user, "\n\"") {
		return "", fmt.Errorf("bad user name %q", user)
	}
	if len(caPEM) == 0 || len(client.CertPEM) == 0 || len(client.KeyPEM) == 0 {
		return "", fmt.Errorf("kubeconfig of %q: CA, client certificate and key are all needed", user)
	}
	b64 := base64.StdEncoding.EncodeToString
	// JSON-compatible YAML: quoted strings need no escaping beyond what
	// the checks above rule out, and base64 needs none.
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: netshim-test
  cluster:
    server: %q
    certificate-authority-data: %s
users:
- name: %q
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: netshim-test
  context:
    cluster: netshim-test
    user: %q
current-context: netshim-test
`, server, b64(caPEM), user, b64(client.CertPEM), b64(client.KeyPEM), user), nil
}
