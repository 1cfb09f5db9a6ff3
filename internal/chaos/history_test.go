package chaos

import "testing"

// Ensure an attempt's type reads success as any 2xx, as the cases do: a
// target answering 201 (NestJS's POST) had every success typed fail, its
// clients retrying acknowledged intents until the run ended and its
// intents counted stuck (the lab's fault, not the target's).
func TestReplyType(t *testing.T) {
	for _, tt := range []struct {
		status int
		want   OpType
	}{{200, OK}, {201, OK}, {204, OK}, {299, OK}, {199, Fail}, {300, Fail}, {409, Fail}, {422, Fail}, {500, Info}, {502, Info}} {
		if got := replyType(tt.status); got != tt.want {
			t.Errorf("replyType(%d) = %q, want %q", tt.status, got, tt.want)
		}
	}
}
