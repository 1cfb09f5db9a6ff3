package registry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"time"

	"idemlab/internal/store"
)

var (
	fpA = store.FingerprintOf([]byte("add-one"))
	fpB = store.FingerprintOf([]byte("different"))
)

const long = time.Minute // a wait no test expects to run out

func acquire(t *testing.T, r *Registry, key string, fp store.Fingerprint) Ticket {
	t.Helper()
	tk, _, err := r.Acquire(context.Background(), key, fp, long)
	if err != nil || tk == nil {
		t.Fatalf("Acquire(%s) = %v, %v, want an owner ticket", key, tk, err)
	}
	return tk
}

// Ensure the first request owns the key and later ones replay its result.
func TestOwnerThenReplay(t *testing.T) {
	r := New(4)
	tk := acquire(t, r, "k", fpA)
	tk.Complete(7)
	tk.Release() // no effect after Complete
	got, v, err := r.Acquire(context.Background(), "k", fpA, long)
	if got != nil || err != nil || v != 7 {
		t.Fatalf("Acquire after Complete = %v, %d, %v, want nil, 7, nil", got, v, err)
	}
	if got, want := r.Len(), 1; got != want {
		t.Fatalf("Len() = %d, want %d", got, want)
	}
}

// Ensure another fingerprint is a conflict, in flight and after completion.
func TestConflict(t *testing.T) {
	r := New(4)
	tk := acquire(t, r, "k", fpA)
	if _, _, err := r.Acquire(context.Background(), "k", fpB, long); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Acquire(other body, in flight) error = %v, want store.ErrConflict", err)
	}
	tk.Complete(1)
	if _, _, err := r.Acquire(context.Background(), "k", fpB, long); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Acquire(other body, recorded) error = %v, want store.ErrConflict", err)
	}
}

// Ensure a full registry refuses new keys, counts in-flight ones, and still replays.
func TestCapacity(t *testing.T) {
	r := New(2)
	acquire(t, r, "a", fpA).Complete(1)
	inflight := acquire(t, r, "b", fpA)
	if _, _, err := r.Acquire(context.Background(), "c", fpA, long); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Acquire(new key, full) error = %v, want store.ErrFull", err)
	}
	if tk, v, err := r.Acquire(context.Background(), "a", fpA, long); tk != nil || err != nil || v != 1 {
		t.Fatalf("Acquire(existing key, full) = %v, %d, %v, want replay of 1", tk, v, err)
	}
	inflight.Release()
	acquire(t, r, "c", fpA) // the released key freed its slot
}

// Ensure a wait that runs out answers store.ErrInProgress and keeps the record.
func TestWaitTimesOut(t *testing.T) {
	r := New(4)
	tk := acquire(t, r, "k", fpA)
	if _, _, err := r.Acquire(context.Background(), "k", fpA, time.Millisecond); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("Acquire(in flight, tiny wait) error = %v, want store.ErrInProgress", err)
	}
	tk.Complete(3)
	if got, v, err := r.Acquire(context.Background(), "k", fpA, long); got != nil || err != nil || v != 3 {
		t.Fatalf("Acquire after owner completed = %v, %d, %v, want replay of 3", got, v, err)
	}
}

// Ensure a waiter gives up when its context ends.
func TestWaitCanceled(t *testing.T) {
	r := New(4)
	acquire(t, r, "k", fpA)
	ctx, cancel := context.WithCancel(context.Background())
	r.onWait = func(string) { cancel() }
	if _, _, err := r.Acquire(ctx, "k", fpA, long); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(canceled) error = %v, want context.Canceled", err)
	}
}

// Ensure waiters share the owner's result once it completes.
func TestWaitersShareResult(t *testing.T) {
	r := New(4)
	tk := acquire(t, r, "k", fpA)
	const n = 8
	var waiting sync.WaitGroup
	waiting.Add(n)
	var once [n]sync.Once
	var idx atomic.Int32
	r.onWait = func(string) {
		i := idx.Add(1) - 1
		if i < n {
			once[i].Do(waiting.Done)
		}
	}
	results := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got Ticket
			got, results[i], errs[i] = r.Acquire(context.Background(), "k", fpA, long)
			if got != nil {
				errs[i] = errors.New("became owner")
			}
		}()
	}
	waiting.Wait()
	tk.Complete(5)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != 5 {
			t.Errorf("waiter %d = %d, %v, want 5, nil", i, results[i], errs[i])
		}
	}
}

// Ensure a released key is claimed again by a waiter, which then owns it.
func TestReleaseLetsWaiterClaim(t *testing.T) {
	r := New(4)
	tk := acquire(t, r, "k", fpA)
	waiting := make(chan struct{})
	var once sync.Once
	r.onWait = func(string) { once.Do(func() { close(waiting) }) }
	type result struct {
		t   Ticket
		err error
	}
	res := make(chan result, 1)
	go func() {
		got, _, err := r.Acquire(context.Background(), "k", fpA, long)
		res <- result{got, err}
	}()
	<-waiting
	tk.Release()
	got := <-res
	if got.err != nil || got.t == nil {
		t.Fatalf("waiter after Release = %v, %v, want an owner ticket", got.t, got.err)
	}
	got.t.Complete(1)
}

// Ensure restored results replay, count toward capacity, and are not doubled.
func TestRestore(t *testing.T) {
	r := New(2)
	if err := r.Restore("k", fpA, 9); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore("k", fpA, 9); !errors.Is(err, ErrExists) {
		t.Fatalf("Restore twice error = %v, want ErrExists", err)
	}
	if got, v, err := r.Acquire(context.Background(), "k", fpA, long); got != nil || err != nil || v != 9 {
		t.Fatalf("Acquire(restored) = %v, %d, %v, want replay of 9", got, v, err)
	}
	if err := r.Restore("j", fpA, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore("i", fpA, 1); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Restore beyond capacity error = %v, want store.ErrFull", err)
	}
}

// Ensure hundreds of concurrent claims of one key make exactly one owner.
func TestClaimIsAtomic(t *testing.T) {
	r := New(1)
	const n = 500
	var owners atomic.Int32
	var wg sync.WaitGroup
	values := make([]int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, v, err := r.Acquire(context.Background(), "k", fpA, long)
			if err != nil {
				t.Error(err)
				return
			}
			if tk != nil {
				owners.Add(1)
				v = 42
				tk.Complete(v)
			}
			values[i] = v
		}()
	}
	wg.Wait()
	if got, want := owners.Load(), int32(1); got != want {
		t.Fatalf("owners = %d, want %d", got, want)
	}
	for i, v := range values {
		if v != 42 {
			t.Fatalf("claim %d got %d, want 42", i, v)
		}
	}
}

// Ensure Forget removes a recorded key (a later Acquire owns it again) but
// never a key still in flight.
func TestForget(t *testing.T) {
	r := New(2)
	done := acquire(t, r, "done", fpA)
	done.Complete(1)
	acquire(t, r, "flying", fpA)
	if !r.Forget("done") || r.Forget("done") {
		t.Fatal("Forget(recorded) = false, or a second Forget = true")
	}
	if r.Forget("flying") || r.Forget("never") {
		t.Fatal("Forget of an in-flight or unknown key = true")
	}
	if got := r.Len(); got != 1 {
		t.Fatalf("Len() = %d after Forget, want 1", got)
	}
	if tk, _, err := r.Acquire(context.Background(), "done", fpB, time.Millisecond); err != nil || tk == nil {
		t.Fatalf("Acquire(forgotten key) = %v, %v, want a new owner", tk, err)
	}
}
