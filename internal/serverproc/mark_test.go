package serverproc

import (
	"cmp"
	"os"
	"strings"
	"testing"
)

// BenchmarkKillMarked measures the scan of /proc a process's exit costs
// (a mark nobody carries: every process's environment read, none killed).
func BenchmarkKillMarked(b *testing.B) {
	for b.Loop() {
		if k := killMarked("nobody.1", 0); k.any() {
			b.Fatalf("killed %v", k)
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

// Ensure strayed names at most strayNamed processes, each command line
// cut at strayLine bytes, counts a pid once however many sweeps found it,
// and says how many it did not name.
func TestStrayed(t *testing.T) {
	long := strings.Repeat("x", strayLine+10)
	tests := []struct {
		name   string
		sweeps [][]int // pids killed, sweep by sweep
		want   string
	}{
		{name: "none", want: ""},
		{name: "one", sweeps: [][]int{{7}}, want: `pid 7 "go ** telemetry **"`},
		{name: "found again by the second sweep", sweeps: [][]int{{7}, {7, 9}}, want: `pid 7 "go ** telemetry **", pid 9 "sleep 1"`},
		{name: "more than named", sweeps: [][]int{{1, 2}, {3, 4, 5}}, want: `pid 1 "sh -c loop", pid 2 "sh -c loop", pid 3 "sh -c loop" and 2 more`},
		{name: "long command line", sweeps: [][]int{{11}}, want: `pid 11 "` + long[:strayLine] + `..."`},
	}
	cmdline := map[int]string{7: "go\x00** telemetry **\x00", 9: "sleep\x001\x00", 11: long}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got strayed
			for _, pids := range tt.sweeps {
				var sweep strayed
				for _, pid := range pids {
					sweep.add(pid, []byte(cmp.Or(cmdline[pid], "sh\x00-c\x00loop")))
				}
				got = got.join(sweep)
			}
			if got.String() != tt.want || got.any() != (tt.want != "") {
				t.Errorf("strayed = %s (any %v), want %s", got, got.any(), tt.want)
			}
		})
	}
}
