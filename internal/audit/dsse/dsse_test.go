package dsse

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure the key files ssh-keygen and openssl make are read, and a
// passphrase, another key type and other data are refused, saying why.
func TestParsePrivateKey(t *testing.T) {
	for _, tt := range []struct {
		file, fingerprint, err string
	}{
		// ssh-keygen -lf test_ed25519.pub prints this fingerprint.
		{"test_ed25519", "SHA256:/t5llepIZr9B67yLnwhhDhfWr8/VNE9eouEUhaq6cdQ", ""},
		{"pkcs8_ed25519.pem", "SHA256:", ""},
		{"encrypted_ed25519", "", "encrypted with aes256-ctr (a passphrase)"},
		{"ecdsa_key", "", `key type "ecdsa-sha2-nistp256", want ssh-ed25519`},
		{"test_ed25519.pub", "", "not one PEM block"},
		{"README.md", "", "not one PEM block"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			key, err := ParsePrivateKey(readKey(t, tt.file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParsePrivateKey(%s) error = %v, want one containing %q", tt.file, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePrivateKey(%s): %v", tt.file, err)
			}
			if got := Fingerprint(key.Public().(ed25519.PublicKey)); !strings.HasPrefix(got, tt.fingerprint) {
				t.Errorf("Fingerprint = %s, want %s", got, tt.fingerprint)
			}
		})
	}
}

// Ensure the envelope carries the payload's exact bytes and a signature
// that ed25519 verifies over DSSE's pre-authentication encoding, with the
// public key ssh-keygen wrote beside the private one, named by its
// fingerprint.
func TestSign(t *testing.T) {
	key, err := ParsePrivateKey(readKey(t, "test_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(readKey(t, "test_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	statement := []byte("{\"_type\": \"https://in-toto.io/Statement/v1\"}\n")
	var e envelopeDoc
	if err := json.Unmarshal(Sign(key, statement), &e); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil || !bytes.Equal(payload, statement) || e.PayloadType != PayloadType || len(e.Signatures) != 1 {
		t.Fatalf("envelope = %+v, want the statement's bytes as payload and one signature", e)
	}
	if got, want := e.Signatures[0].KeyID, Fingerprint(pub); got != want {
		t.Errorf("keyid = %s, want the .pub file's fingerprint %s", got, want)
	}
	sig, err := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	want := "DSSEv1 28 application/vnd.in-toto+json 45 " + string(statement)
	if got := string(PAE(PayloadType, statement)); got != want {
		t.Fatalf("PAE = %q, want %q", got, want)
	}
	if !ed25519.Verify(pub, []byte(want), sig) {
		t.Fatal("the signature does not verify with the .pub file's key")
	}
	if ed25519.Verify(pub, []byte(want+" "), sig) {
		t.Fatal("the signature verifies other bytes")
	}
}

func readKey(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "keys", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
