package caserun

import (
	"testing"

	"idemlab/internal/protocol"
)

func ptr[T any](v T) *T { return &v }

// Ensure a concurrent group sorts to one canonical order whatever the arrival
// order, and the permutation says where each call came from.
func TestSortCanonical(t *testing.T) {
	fresh := Call{Outcome: protocol.OutcomeReply, Status: ptr(200), Body: ptr("1"), Replayed: ptr(false)}
	replay := Call{Outcome: protocol.OutcomeReply, Status: ptr(200), Body: ptr("1"), Replayed: ptr(true)}
	lost := Call{Outcome: protocol.OutcomeNoReply}
	conflict := Call{Outcome: protocol.OutcomeReply, Status: ptr(409), Body: ptr("in progress\n")}
	calls := []Call{replay, conflict, lost, replay, fresh}
	perm := SortCanonical(calls)
	want := []Call{lost, fresh, replay, replay, conflict}
	for i := range want {
		if Compare(calls[i], want[i]) != 0 {
			t.Fatalf("calls[%d] = %+v, want %+v", i, calls[i], want[i])
		}
	}
	if got, want := perm, []int{2, 4, 0, 3, 1}; !equal(got, want) {
		t.Fatalf("perm = %v, want %v", got, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
