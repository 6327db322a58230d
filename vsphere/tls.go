package vsphere

import (
	"crypto/sha1" //nolint:gosec // vSphere thumbprints are SHA-1 or SHA-256.
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// tlsConfig verifies vCenter's certificate by pinned thumbprint, by CA bundle, or not at
// all when Insecure, in that order of precedence. Without any, the system roots apply.
func tlsConfig(cfg Config) (*tls.Config, error) {
	switch {
	case cfg.Thumbprint != "":
		want, err := parseThumbprint(cfg.Thumbprint)
		if err != nil {
			return nil, err
		}
		return &tls.Config{
			// Verification is by pinned thumbprint, done in VerifyConnection.
			InsecureSkipVerify: true, //nolint:gosec // pinned below.
			MinVersion:         tls.VersionTLS12,
			VerifyConnection: func(cs tls.ConnectionState) error {
				return verifyThumbprint(cs, want)
			},
		}, nil
	case len(cfg.CABundle) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("CA bundle holds no PEM certificate")
		}
		return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
	case cfg.Insecure:
		return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil //nolint:gosec // asked for.
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}, nil
}

// parseThumbprint accepts SHA-1 or SHA-256 thumbprints in hex, with or without colons,
// in either case.
func parseThumbprint(tp string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(tp), ":", ""))
	if err != nil || (len(b) != sha1.Size && len(b) != sha256.Size) {
		return nil, fmt.Errorf("thumbprint %q is not a SHA-1 or SHA-256 fingerprint in hex", tp)
	}
	return b, nil
}

func verifyThumbprint(cs tls.ConnectionState, want []byte) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("vCenter presented no certificate")
	}
	raw := cs.PeerCertificates[0].Raw
	var got []byte
	if len(want) == sha1.Size {
		sum := sha1.Sum(raw) //nolint:gosec // thumbprint, not a signature.
		got = sum[:]
	} else {
		sum := sha256.Sum256(raw)
		got = sum[:]
	}
	if subtle.ConstantTimeCompare(got, want) == 1 {
		return nil
	}
	return fmt.Errorf("vCenter certificate thumbprint %s does not match the configured thumbprint %s",
		colonHex(got), colonHex(want))
}

func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02X", x)
	}
	return strings.Join(parts, ":")
}
