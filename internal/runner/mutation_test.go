package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// mutantTries bounds the runs of one mutant: a flaw caught by a race (a
// concurrent duplicate landing in check-then-act's 20 ms gap) is caught
// on most runs, not all: under -race on a loaded 2-core machine the twelve
// duplicates can arrive spread wider than the gap (CI saw it once). A
// race is judged as a rate, not one roll: caught on one run of three. So
// is forget-on-lost-reply, whose server forgets the key just after it
// closes the connection: under -race a retry once reached the registry
// before the forgetting did, and got the recorded result (CI).
const mutantTries = 3

// Ensure the lab's checks can fail: each deliberately broken registry makes
// the audit fail, naming the case that was built to catch it, on one run
// of mutantTries at least (a mutation score of 6/6, every flaw
// protocol.Flaws lists). Each run is of that case alone (-case): what the
// other cases make of a flaw is not this test's claim, and the whole suite
// per flaw cost 4 s a run. The sound registry passing is TestEndToEnd.
func TestMutationScore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the lab once per flaw")
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
			var cases []string
			for try := 1; try <= mutantTries && !slices.Contains(cases, want); try++ {
				out.Reset()
				err := Run(context.Background(), Options{
					Root: "../..", Out: filepath.Join(dir, fmt.Sprintf("%s-%d", flaw, try)), Stores: []protocol.Store{protocol.Volatile}, Case: want,
					Intents: DefaultIntents, Unsafe: flaw, Stdout: &out, Stderr: &out,
				})
				cases = nil
				switch {
				case err == nil: // not caught on this run: a race, tried again
					t.Logf("%s, run %d: the audit passed", flaw, try)
					continue
				case !errors.Is(err, ErrAuditFailed):
					t.Fatalf("Run with %s = %v, want the audit to fail\n%s", flaw, err, out.String())
				}
				for _, m := range named.FindAllStringSubmatch(out.String(), -1) {
					if !slices.Contains(cases, m[1]) {
						cases = append(cases, m[1])
					}
				}
				t.Logf("%s, run %d: caught by %v", flaw, try, cases)
			}
			if !slices.Contains(cases, want) {
				t.Fatalf("the audit failed naming cases %v, want %s among them on one of %d runs:\n%s", cases, want, mutantTries, out.String())
			}
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
