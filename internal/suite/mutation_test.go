package suite

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"testing"

	"idemlab/internal/protocol"
)

// Ensure the lab's checks can fail: each deliberately broken registry makes
// the audit fail, naming at least one case that caught it (a mutation score
// of 4/4). The sound registry passing is TestEndToEnd.
func TestMutationScore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the case suite once per flaw")
	}
	caught := regexp.MustCompile(`(?m)^case ([a-z_]+), store volatile`)
	dir := t.TempDir()
	for _, flaw := range protocol.Flaws {
		t.Run(string(flaw), func(t *testing.T) {
			var out bytes.Buffer
			err := Run(context.Background(), Options{
				Root: "../..", Out: filepath.Join(dir, string(flaw)), Stores: []protocol.Store{protocol.Volatile},
				Intents: DefaultIntents, Unsafe: flaw, Stdout: &out, Stderr: &out,
			})
			if !errors.Is(err, ErrAuditFailed) {
				t.Fatalf("Run with %s = %v, want the audit to fail\n%s", flaw, err, out.String())
			}
			m := caught.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("the audit failed without naming a case:\n%s", out.String())
			}
			t.Logf("%s caught by %s", flaw, m[1])
		})
	}
}
