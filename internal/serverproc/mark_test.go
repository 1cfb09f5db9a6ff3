package serverproc

import (
	"os"
	"testing"
)

// BenchmarkKillMarked measures the scan of /proc a process's exit costs
// (a mark nobody carries: every process's environment read, none killed).
func BenchmarkKillMarked(b *testing.B) {
	for b.Loop() {
		if n := killMarked("nobody.1", 0); n != 0 {
			b.Fatalf("killed %d", n)
		}
	}
	entries, _ := os.ReadDir("/proc")
	b.ReportMetric(float64(len(entries)), "proc-entries")
}

// Ensure withMark replaces a mark the environment already carries (a
// runner started by another marks its processes as its own) and reads
// the runner's environment for nil.
func TestWithMark(t *testing.T) {
	got := withMark([]string{"A=1", MarkEnv + "=old.1", "B=2"}, "new.2")
	want := []string{"A=1", "B=2", MarkEnv + "=new.2"}
	if len(got) != len(want) {
		t.Fatalf("withMark = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("withMark = %q, want %q", got, want)
		}
	}
	t.Setenv("IDEMLAB_TEST_WITHMARK", "x")
	inherited := withMark(nil, "m.1")
	found := false
	for _, kv := range inherited {
		found = found || kv == "IDEMLAB_TEST_WITHMARK=x"
	}
	if !found || inherited[len(inherited)-1] != MarkEnv+"=m.1" {
		t.Errorf("withMark(nil) = %q, want the runner's environment and the mark last", inherited)
	}
}
