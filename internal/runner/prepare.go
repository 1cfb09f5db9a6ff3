package runner

import (
	"context"
	"io"
	"sync"

	"idemlab/internal/target"
)

// background runs a run's preparations beside it: the lab's builds and the
// targets' setups. stop cancels what still runs and waits for it, so that
// no go build or npm outlives Run on any path.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newBackground(ctx context.Context) *background {
	ctx, cancel := context.WithCancel(ctx)
	return &background{ctx: ctx, cancel: cancel}
}

func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}

// later is a result made in the background: wait for it, or for ctx to end.
type later[T any] func(ctx context.Context) (T, error)

// start runs f in the background and returns its result to wait for.
func start[T any](b *background, f func(ctx context.Context) (T, error)) later[T] {
	done := make(chan struct{})
	var v T
	var err error
	b.wg.Go(func() {
		defer close(done)
		v, err = f(b.ctx)
	})
	return func(ctx context.Context) (T, error) {
		select {
		case <-done:
			return v, err
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// setups are the targets' setups (npm ci) started when the run began.
type setups map[*target.Target]later[struct{}]

// startSetups starts in the background the setup of each of ts that can run.
func startSetups(b *background, ts []*target.Target, havePostgres bool, log io.Writer) (setups, error) {
	s := setups{}
	for _, t := range ts {
		if len(t.Setup) == 0 || missing(t, havePostgres) != "" {
			continue // runTarget and chaosNotRun say why it is skipped
		}
		digest, err := t.Digest()
		if err != nil {
			return nil, targetsFault(t, err) // its folder holds what the lab cannot read
		}
		s[t] = start(b, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, t.EnsureSetup(ctx, digest, log)
		})
	}
	return s, nil
}

// waitAll waits for the background setup of each of ts, in order; a
// setup that failed is a *TargetError.
func (s setups) waitAll(ctx context.Context, ts []*target.Target) error {
	for _, t := range ts {
		if wait, ok := s[t]; ok {
			if _, err := wait(ctx); err != nil {
				return targetsFault(t, err)
			}
		}
	}
	return nil
}

// ensure waits for t's setup started in the background, or runs it now;
// a setup that failed is a *TargetError.
func (s setups) ensure(ctx context.Context, t *target.Target, digest string, log io.Writer) error {
	if wait, ok := s[t]; ok {
		_, err := wait(ctx)
		return targetsFault(t, err)
	}
	return targetsFault(t, t.EnsureSetup(ctx, digest, log))
}

// lockOutput returns stdout and stderr behind one lock (nil stays nil): the
// background's lines and the run's come from several goroutines, and
// Stdout and Stderr may be one buffer.
func lockOutput(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	var mu sync.Mutex
	lock := func(w io.Writer) io.Writer {
		if w == nil {
			return nil
		}
		return writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return w.Write(p)
		})
	}
	return lock(stdout), lock(stderr)
}
