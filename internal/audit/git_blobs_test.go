package audit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure a blob over the source cap is an error, not a hang: git, still
// writing the blob nobody reads, is stopped before the audit waits for it.
func TestReadBlobsOverCapReturns(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", CapSource+1024)
	if err := os.WriteFile(filepath.Join(dir, "big"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "big"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	id, err := exec.Command("git", "-C", dir, "hash-object", "big").Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(id))
	if _, err := readBlobs(dir, []string{blob, blob}); err == nil || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("readBlobs = %v, want an over-the-cap error", err)
	}
}
