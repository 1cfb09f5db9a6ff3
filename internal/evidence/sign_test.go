package evidence

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/schemacheck"
)

// Ensure runner -sign reads the key files ssh-keygen and openssl make and
// refuses, saying why, a passphrase, another key type and other data.
func TestParseSigningKey(t *testing.T) {
	for _, tt := range []struct {
		file, keyID, err string
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
			data, err := os.ReadFile(filepath.Join("testdata", "keys", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			s, err := ParseSigningKey(data)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseSigningKey(%s) error = %v, want one containing %q", tt.file, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSigningKey(%s): %v", tt.file, err)
			}
			if !strings.HasPrefix(s.KeyID, tt.keyID) {
				t.Errorf("KeyID = %s, want %s", s.KeyID, tt.keyID)
			}
		})
	}
}

// Ensure the envelope carries the statement's exact bytes and a signature
// that ed25519 verifies over DSSE's pre-authentication encoding, with the
// public key ssh-keygen wrote beside the private one.
func TestEnvelope(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "keys", "test_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSigningKey(data)
	if err != nil {
		t.Fatal(err)
	}
	pubLine, err := os.ReadFile(filepath.Join("testdata", "keys", "test_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	blob, err := base64.StdEncoding.DecodeString(strings.Fields(string(pubLine))[1])
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.PublicKey(blob[len(blob)-ed25519.PublicKeySize:])
	if got, want := s.KeyID, Fingerprint(pub); got != want {
		t.Fatalf("KeyID = %s, want the .pub file's fingerprint %s", got, want)
	}
	statement := []byte("{\"_type\": \"https://in-toto.io/Statement/v1\"}\n")
	env, err := s.Envelope(statement)
	if err != nil {
		t.Fatal(err)
	}
	var e envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil || !bytes.Equal(payload, statement) || e.PayloadType != PayloadType || len(e.Signatures) != 1 {
		t.Fatalf("envelope = %s, want the statement's bytes as payload and one signature", env)
	}
	sig, err := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	want := "DSSEv1 28 application/vnd.in-toto+json 45 " + string(statement)
	if got := string(pae(PayloadType, statement)); got != want {
		t.Fatalf("pae = %q, want %q", got, want)
	}
	if !ed25519.Verify(pub, []byte(want), sig) {
		t.Fatal("the signature does not verify with the .pub file's key")
	}
	if ed25519.Verify(pub, []byte(want+" "), sig) {
		t.Fatal("the signature verifies other bytes")
	}
}

// Ensure WriteSigned writes the envelope of the statement it wrote, and
// an unsigned Write leaves no stale envelope behind.
func TestWriteSigned(t *testing.T) {
	set, err := schemacheck.Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "keys", "test_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSigningKey(data)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{
		SchemaVersion: 1, GeneratedUTC: "2026-01-02T03:04:05Z", SourceCommit: "unknown", GoVersion: "go1", OSArch: "linux/amd64",
		ServerSHA256: SHA256(nil), Protocol: Protocol{Capacity: 1, MaxBody: 1, WaitMS: 1, ClientTimeoutMS: 1},
		Selection: Selection{Cases: []string{}, Stores: []string{}, Targets: []string{}, Experiments: []string{"jitter"}}, Targets: []ManifestTarget{},
		Flags: map[string]string{}, Sources: map[string]string{"go.mod": SHA256(nil)},
	}
	dir := filepath.Join(t.TempDir(), "ev")
	files := []File{{Name: "jitter.svg", Data: []byte("<svg/>\n")}}
	if err := WriteSigned(dir, set, files, m, Tests{}, s); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(dir, StatementName))
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(dir, EnvelopeName))
	if err != nil {
		t.Fatal(err)
	}
	var e envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	if got, want := e.Payload, base64.StdEncoding.EncodeToString(st); got != want {
		t.Fatalf("envelope payload = %s, want the written statement %s", got, want)
	}
	if err := Write(dir, set, files, m, Tests{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, EnvelopeName)); !os.IsNotExist(err) {
		t.Fatalf("an unsigned Write left %s: %v", EnvelopeName, err)
	}
}
