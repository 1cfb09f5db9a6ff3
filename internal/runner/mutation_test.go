package runner

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"idemlab/internal/protocol"
)

// caughtBy names, for every flaw, the case that must catch it on the
// volatile store: the case whose expectation the flaw breaks by design
// (each mutant's doc comment says how).
var caughtBy = map[protocol.Flaw]string{
	protocol.FlawRecordAfterEffect:  "concurrent_duplicate", // duplicates miss the in-flight owner: counter 12
	protocol.FlawNoFingerprint:      "body_conflict",        // the other body replays instead of 422
	protocol.FlawEvictOldest:        "capacity_and_input",   // overflow evicts key-0, whose retry applies again: counter 66
	protocol.FlawForgetOnLostReply:  "keyed_lost_reply",     // the retry applies again: counter 2
	protocol.FlawRecordBeforeEffect: "concurrent_duplicate", // duplicates replay the placeholder "0" while the owner runs
	protocol.FlawCheckThenAct:       "concurrent_duplicate", // duplicates in the check-insert gap each own the key
}

// Ensure the lab's checks can fail: each deliberately broken registry makes
// the audit fail, naming the case that was built to catch it (a mutation
// score of 6/6, every flaw protocol.Flaws lists). The sound registry
// passing is TestEndToEnd.
func TestMutationScore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the case suite once per flaw")
	}
	named := regexp.MustCompile(`(?m)^case ([a-z0-9_]+), store volatile`)
	dir := t.TempDir()
	caught := 0
	for _, flaw := range protocol.Flaws {
		ok := t.Run(string(flaw), func(t *testing.T) {
			want, listed := caughtBy[flaw]
			if !listed {
				t.Fatalf("no case named to catch %s: add it to caughtBy", flaw)
			}
			var out bytes.Buffer
			err := Run(context.Background(), Options{
				Root: "../..", Out: filepath.Join(dir, string(flaw)), Stores: []protocol.Store{protocol.Volatile},
				Intents: DefaultIntents, Unsafe: flaw, Stdout: &out, Stderr: &out,
			})
			if !errors.Is(err, ErrAuditFailed) {
				t.Fatalf("Run with %s = %v, want the audit to fail\n%s", flaw, err, out.String())
			}
			var cases []string
			for _, m := range named.FindAllStringSubmatch(out.String(), -1) {
				if !slices.Contains(cases, m[1]) {
					cases = append(cases, m[1])
				}
			}
			if !slices.Contains(cases, want) {
				t.Fatalf("the audit failed naming cases %v, want %s among them:\n%s", cases, want, out.String())
			}
			t.Logf("%s caught by %v", flaw, cases)
		})
		if ok {
			caught++
		}
	}
	if got, want := caught, len(protocol.Flaws); got != want {
		t.Fatalf("mutation score %d/%d, want %d/%d", got, want, want, want)
	}
	t.Logf("mutation score %d/%d", caught, len(protocol.Flaws))
}
