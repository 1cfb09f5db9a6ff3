package shard

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, err string
		want    Slice
	}{
		{in: "1/1", want: Slice{1, 1}},
		{in: "3/4", want: Slice{3, 4}},
		{in: "64/64", want: Slice{64, 64}},
		{in: "0/4", err: "K outside 1..N"},
		{in: "5/4", err: "K outside 1..N"},
		{in: "1/65", err: "N outside 1..64"},
		{in: "1/0", err: "N outside"},
		{in: "2", err: "want K/N"},
		{in: "a/b", err: "want K/N"},
		{in: "", err: "want K/N"},
		{in: "1/2/3", err: "want K/N"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q): %v, want an error with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// Ensure the slices of a run hold every cell exactly once, each slice its
// share of every case's trials (at most one apart), and the whole run
// every cell.
func TestSlicesCoverOnce(t *testing.T) {
	cases := []string{"keyed_lost_reply", "concurrent_duplicate", "body_conflict", "restart_after_reply"}
	stores := []string{"volatile", "durable", "postgres"}
	for _, n := range []int{1, 2, 3, 7} {
		for _, trials := range []int{1, 3, 10} {
			for _, c := range cases {
				held := map[int]int{}
				for k := 1; k <= n; k++ {
					got := Slice{k, n}.Trials("own-service", c, trials)
					if len(got) < trials/n || len(got) > trials/n+1 {
						t.Errorf("%d/%d holds %v of %s's %d trials: not its share", k, n, got, c, trials)
					}
					for _, tr := range got {
						held[tr]++
					}
				}
				for tr := 1; tr <= trials; tr++ {
					if held[tr] != 1 {
						t.Errorf("N=%d: trial %d of %s held by %d slices, want 1", n, tr, c, held[tr])
					}
				}
				if w := (Slice{}).Trials("own-service", c, trials); len(w) != trials {
					t.Errorf("the whole run holds %v of %d trials", w, trials)
				}
				for _, s := range stores {
					count := 0
					for k := 1; k <= n; k++ {
						if (Slice{k, n}).HoldsStoreRun(c, s) {
							count++
						}
					}
					if count != 1 || !(Slice{}).HoldsStoreRun(c, s) {
						t.Errorf("N=%d: case %s on %s held by %d slices, want 1", n, c, s, count)
					}
				}
			}
		}
	}
}

// Ensure the slices do not move: a slice run on one machine and its
// neighbour on another agree on who holds what only if the rule is the
// same on both (a change here changes which trials a slice runs).
func TestSlicesPinned(t *testing.T) {
	var b strings.Builder
	for k := 1; k <= 3; k++ {
		fmt.Fprintf(&b, "%d/3 %v %v %v|", k, Slice{k, 3}.Trials("own-service", "keyed_lost_reply", 5),
			Slice{k, 3}.HoldsStoreRun("keyed_lost_reply", "volatile"), Slice{k, 3}.HoldsStoreRun("body_conflict", "postgres"))
	}
	if got, want := b.String(), pinned; got != want {
		t.Errorf("slices moved:\n got %s\nwant %s", got, want)
	}
}

const pinned = "1/3 [1 4] false true|2/3 [2 5] true false|3/3 [3] false false|"
