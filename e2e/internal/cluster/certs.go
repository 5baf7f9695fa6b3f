package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// pki is the harness's own certificate authority. The API server's serving
// certificate and the admin client certificate are issued once per Cluster,
// so that both survive an API server restart: StartTestServer would otherwise
// generate a new serving certificate (and a new loopback token) every time,
// and every client would have to be rebuilt.
type pki struct {
	caPEM []byte

	serverCertPEM, serverKeyPEM []byte
	adminCertPEM, adminKeyPEM   []byte
}

func newPKI() (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dynmig-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}

	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
	}
	p.serverCertPEM, p.serverKeyPEM, err = issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost", "kubernetes.default.svc"})
	if err != nil {
		return nil, fmt.Errorf("issue serving certificate: %w", err)
	}
	// system:masters bypasses authorization: the admin client is the
	// test's own hand, never a component under test.
	p.adminCertPEM, p.adminKeyPEM, err = issue(3, pkix.Name{CommonName: "dynmig-e2e-admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("issue admin certificate: %w", err)
	}
	return p, nil
}
