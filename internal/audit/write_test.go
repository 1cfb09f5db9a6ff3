package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Ensure -write writes every file the audit derives (then compared
// without it), removes one the selection does not derive, and sums up.
func TestAuditWrite(t *testing.T) {
	f := newFixture(t)
	f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "unkeyed_lost_reply")["counter"] = 3 })
	f.rehash(t)
	for _, n := range []string{"REPORT.md", VerdictsFile, StatementFile} {
		os.Remove(f.path("evidence/" + n))
	}
	f.write(t, "evidence/TARGETS.md", "# idemlab targets\n")

	before := auditMessages(t, Options{Root: f.root, Evidence: f.evidence})
	if want := []string{
		"file TARGETS.md: not listed in the manifest, and not a file the audit derives for this selection",
		"case unkeyed_lost_reply, store volatile: counter: expected 2, observed 3",
		"REPORT.md: missing: the audit derives it from the observations (audit -write writes it)",
		"verdicts.json: missing: the audit derives it from the observations (audit -write writes it)",
		"statement.intoto.json: missing: the audit derives it from the observations (audit -write writes it)",
	}; !slices.Equal(before, want) {
		t.Errorf("Audit() before -write: failures =\n%s\nwant\n%s", strings.Join(before, "\n"), strings.Join(want, "\n"))
	}

	r, err := Audit(Options{Root: f.root, Evidence: f.evidence, Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := messages(r); len(got) != 1 {
		t.Errorf("Audit(-write) failures = %q, want the forged counter's alone", got)
	}
	if want := "unkeyed_lost_reply"; !strings.Contains(r.Summary, want) || !strings.Contains(r.Summary, "MISMATCH") {
		t.Errorf("Audit(-write).Summary =\n%s\nwant the runs' verdicts, %s a MISMATCH", r.Summary, want)
	}
	if _, err := os.Stat(f.path("evidence/TARGETS.md")); !os.IsNotExist(err) {
		t.Errorf("TARGETS.md after -write: stat error %v, want it removed", err)
	}
	after := auditMessages(t, Options{Root: f.root, Evidence: f.evidence})
	if want := "case unkeyed_lost_reply, store volatile: counter: expected 2, observed 3"; len(after) != 1 || after[0] != want {
		t.Errorf("Audit() after -write: failures = %q, want [%q]", after, want)
	}
	validVerdicts(t, f)
}

// Ensure -write -sign signs the statement as -verify-key checks it, and a
// statement derived again unsigned no longer matches the envelope.
func TestAuditSign(t *testing.T) {
	f := newFixture(t)
	key, pub := writeKeys(t)

	if _, err := Audit(Options{Root: f.root, Evidence: f.evidence, SignKey: key}); err == nil || err.Error() != "-sign writes a signed statement: it goes with -write" {
		t.Errorf("Audit(-sign without -write) error = %v, want it refused", err)
	}
	if _, err := Audit(Options{Root: f.root, Evidence: f.evidence, Write: true, SignKey: key}); err != nil {
		t.Fatal(err)
	}
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence, VerifyKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, r, messages(r), nil, "")
	if !strings.Contains(claimTexts(r.Rederived), "is signed (DSSE, ed25519) by the key SHA256:") {
		t.Errorf("Audit(-verify-key).Rederived = %q, want the signature among them", claimTexts(r.Rederived))
	}

	// A forged run, derived again but not signed: the old envelope signs
	// the old statement.
	f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "unkeyed_lost_reply")["counter"] = 3 })
	f.rehash(t)
	got := auditMessages(t, Options{Root: f.root, Evidence: f.evidence, VerifyKey: pub})
	want := []string{
		"case unkeyed_lost_reply, store volatile: counter: expected 2, observed 3",
		"statement.intoto.dsse.json: its payload is not statement.intoto.json byte for byte: the signature is of other bytes",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Audit(-verify-key) after the statement changed: failures =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// writeKeys writes a fresh ed25519 key pair as PEM files (PKCS #8 and
// PKIX, as openssl writes them) and returns their paths.
func writeKeys(t *testing.T) (private, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	private, public = filepath.Join(dir, "key.pem"), filepath.Join(dir, "key.pub.pem")
	for p, b := range map[string]*pem.Block{private: {Type: "PRIVATE KEY", Bytes: p8}, public: {Type: "PUBLIC KEY", Bytes: pk}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return private, public
}

// auditMessages audits and returns the failure lines.
func auditMessages(t *testing.T, opts Options) []string {
	t.Helper()
	r, err := Audit(opts)
	if err != nil {
		t.Fatal(err)
	}
	return messages(r)
}

// claimTexts joins the texts of claims, one a line.
func claimTexts(cs []Claim) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Text + "\n")
	}
	return b.String()
}
