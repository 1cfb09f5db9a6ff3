package caserun

import (
	"fmt"
	"strconv"
	"strings"

	"idemlab/internal/serverproc"
)

// The bounds of what a target's count and journal commands print on
// stdout, enforced while it is read (docs/bounds.md): past one the command
// is killed and the run stops with an error naming the command and the
// bound.
const (
	// maxCountBytes: one integer and white space around it.
	maxCountBytes = 4 << 10
	// maxJournalBytes: a chaos run makes at most 300,000 attempts
	// (chaos.MaxHistory), each applying at most one effect the journal
	// prints in about 100 bytes ({"value":N,"body_sha256":"64 hex"}):
	// 30 MB; 64 MiB leaves room for white space, and is the sink's own
	// largest body (sink.MaxMaxBody).
	maxJournalBytes = 64 << 20
	// maxStderrBytes: the tail of what they print on stderr kept for an error.
	maxStderrBytes = 4 << 10
)

// countWhat is what countEffects calls its command in runAfter.
const countWhat = "count effects"

// afterBound is the bound of what command what (runAfter's) prints on stdout.
func afterBound(what string) int {
	if what == countWhat {
		return maxCountBytes
	}
	return maxJournalBytes
}

// checkAfter refuses what a command printed where its form alone shows it
// impossible: a negative count. (countEffects refuses what is no integer.)
func checkAfter(what string, out []byte) error {
	s := strings.TrimSpace(string(out))
	if n, err := strconv.ParseInt(s, 10, 64); what == countWhat && err == nil && n < 0 {
		return fmt.Errorf("printed %q: a negative count", s)
	}
	return nil
}

// stderrTail is what a command printed on stderr, its end, on one line
// after ": ", saying how much came before; "" where it printed nothing.
func stderrTail(t *serverproc.Tail) string {
	s := strings.ReplaceAll(strings.TrimSpace(string(t.Bytes())), "\n", " | ")
	if s == "" {
		return ""
	}
	if cut := t.Cut(); cut > 0 {
		return fmt.Sprintf(": (%d bytes of stderr before these not kept) ...%s", cut, s)
	}
	return ": " + s
}
