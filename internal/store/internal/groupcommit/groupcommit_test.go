package groupcommit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ensure the committer's batches: the first call alone (its run holds the
// committer while the others queue), then every call waiting at that
// moment up to MaxBatch, the carry of one batch opening the next ahead of
// the calls taken with it, and Close stopping only once the batch in
// progress and its carries have run. Every call is answered its own
// argument, and a Do after Close gets ErrClosed.
//
// The test's run plays a store: like the postgres store it carries a call
// whose argument an earlier call of the batch has, and it carries once a
// call whose argument ends in ">" (a store may carry any call).
func TestCommitter(t *testing.T) {
	keys := make([]string, MaxBatch+10)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	for _, tc := range []struct {
		name    string
		queue   int
		first   string     // the first call: its batch runs while the others queue
		waiting []string   // queued in this order while the first batch runs
		close   bool       // Close is called while the first batch runs
		want    [][]string // the batches handed to run, carried calls included
	}{
		{
			name:  "a lone call, unbuffered queue",
			first: "a",
			want:  [][]string{{"a"}},
		},
		{
			name:    "the calls waiting at one moment share a batch",
			queue:   MaxBatch,
			first:   "a",
			waiting: []string{"b", "c", "d"},
			want:    [][]string{{"a"}, {"b", "c", "d"}},
		},
		{
			name:    "a batch takes at most MaxBatch, the rest the next one",
			queue:   2 * MaxBatch,
			first:   "a",
			waiting: keys,
			want:    [][]string{{"a"}, keys[:MaxBatch], keys[MaxBatch:]},
		},
		{
			name:    "carried duplicates run in the next batch, in order",
			queue:   MaxBatch,
			first:   "a",
			waiting: []string{"b", "a", "b", "c", "a"},
			want:    [][]string{{"a"}, {"b", "a", "b", "c", "a"}, {"b", "a"}},
		},
		{
			name:    "a carry opens the next batch, ahead of the calls queued since",
			queue:   MaxBatch,
			first:   "a>",
			waiting: []string{"b", "c"},
			want:    [][]string{{"a>"}, {"a>", "b", "c"}},
		},
		{
			name:    "Close runs the batch in progress, its carries and the calls they take",
			queue:   MaxBatch,
			first:   "a>",
			waiting: []string{"b", "b"},
			close:   true,
			want:    [][]string{{"a>"}, {"a>", "b", "b"}, {"b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var batches [][]string // the committer's; read after Close
			passed := map[string]bool{}
			started, release := make(chan struct{}), make(chan struct{})
			c := Start(tc.queue, func(batch []*Call[string, string]) (carry []*Call[string, string]) {
				args := make([]string, len(batch))
				for i, call := range batch {
					args[i] = call.Arg
				}
				batches = append(batches, args)
				if len(batches) == 1 {
					close(started)
					<-release
				}
				seen := map[string]bool{}
				for _, call := range batch {
					a := call.Arg
					if seen[a] || strings.HasSuffix(a, ">") && !passed[a] {
						passed[a] = true
						carry = append(carry, call)
						continue
					}
					seen[a] = true
					call.Answer(a)
				}
				return carry
			})
			args := append([]string{tc.first}, tc.waiting...)
			answers := make([]string, len(args))
			errs := make([]error, len(args))
			var wg sync.WaitGroup
			do := func(i int) { wg.Go(func() { answers[i], errs[i] = c.Do(args[i]) }) }
			do(0)
			<-started
			for i := range tc.waiting {
				do(i + 1)
				waitFor(t, fmt.Sprintf("%d calls queued", i+1), func() bool { return c.Queued() == i+1 })
			}
			if tc.close {
				go c.Close()
				waitClosing(t, c)
			}
			close(release)
			wg.Wait()
			c.Close()
			if !slices.EqualFunc(batches, tc.want, slices.Equal) {
				t.Errorf("batches = %q, want %q", batches, tc.want)
			}
			for i, a := range args {
				if answers[i] != a || errs[i] != nil {
					t.Errorf("Do(%q) = %q, %v; want %q", a, answers[i], errs[i], a)
				}
			}
			if _, err := c.Do("late"); !errors.Is(err, ErrClosed) {
				t.Errorf("Do after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// Ensure a call the committer never took gets ErrClosed from Do, not a
// hang, and one it took gets its answer: Close while calls wait behind a
// batch without a carry lets the committer stop before or after taking
// them, and either way each Do returns.
func TestCloseAnswersOrRefusesQueuedCalls(t *testing.T) {
	for range 20 {
		var ran []string // the committer's; read after Close
		started, release := make(chan struct{}), make(chan struct{})
		c := Start(MaxBatch, func(batch []*Call[string, string]) []*Call[string, string] {
			for _, call := range batch {
				ran = append(ran, call.Arg)
			}
			if len(ran) == 1 {
				close(started)
				<-release
			}
			for _, call := range batch {
				call.Answer(call.Arg)
			}
			return nil
		})
		args := []string{"a", "b", "c"}
		answers := make([]string, len(args))
		errs := make([]error, len(args))
		var wg sync.WaitGroup
		wg.Go(func() { answers[0], errs[0] = c.Do(args[0]) })
		<-started
		for i := 1; i < len(args); i++ {
			wg.Go(func() { answers[i], errs[i] = c.Do(args[i]) })
		}
		waitFor(t, "2 calls queued", func() bool { return c.Queued() == 2 })
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		waitClosing(t, c)
		close(release)
		wg.Wait()
		<-closed
		for i, a := range args {
			switch {
			case slices.Contains(ran, a) && (answers[i] != a || errs[i] != nil):
				t.Fatalf("Do(%q), which ran, = %q, %v; want %q", a, answers[i], errs[i], a)
			case !slices.Contains(ran, a) && !errors.Is(errs[i], ErrClosed):
				t.Fatalf("Do(%q), which never ran, = %q, %v; want ErrClosed", a, answers[i], errs[i])
			}
		}
	}
}

// waitClosing waits until c's Close has begun: its stop channel is closed.
func waitClosing(t *testing.T, c *Committer[string, string]) {
	t.Helper()
	waitFor(t, "Close", func() bool {
		select {
		case <-c.stop:
			return true
		default:
			return false
		}
	})
}

// waitFor waits up to 10 s for cond, polling.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
	}
}
