// Package groupcommit is the group committer the durable and postgres
// stores share: one goroutine takes every call waiting, up to MaxBatch,
// and hands them to the store as one batch to run in one transaction.
// Calls a batch cannot run together come back as a carry that opens the
// next batch; the committer stops only with no carry, so every call it
// takes is answered.
package groupcommit

import (
	"errors"
	"sync"
)

// MaxBatch bounds how many calls share one batch.
const MaxBatch = 256

// ErrClosed: the committer stopped without taking the call; none of it ran.
var ErrClosed = errors.New("committer closed")

// A Call is an argument handed to the committer and, later, its answer.
type Call[A, R any] struct {
	Arg  A
	done chan R // buffered: the committer never waits for the caller
}

// NewCall returns a call of arg, not yet answered.
func NewCall[A, R any](arg A) *Call[A, R] {
	return &Call[A, R]{Arg: arg, done: make(chan R, 1)}
}

// Answer gives c its answer, once.
func (c *Call[A, R]) Answer(r R) { c.done <- r }

// Wait waits for c's answer and returns it.
func (c *Call[A, R]) Wait() R { return <-c.done }

// A Committer runs batches of calls on its own goroutine until Close. Its
// methods are safe for concurrent use.
type Committer[A, R any] struct {
	queue   chan *Call[A, R]
	stop    chan struct{} // closed by Close
	stopped chan struct{} // closed by the committer when it returns
	once    sync.Once
	run     func(batch []*Call[A, R]) (carry []*Call[A, R])
}

// Start starts a committer with a queue of queue calls that hands each
// batch to run. run must answer every call of batch except those it
// returns as carry (in run order), and must not keep batch: the next
// batch reuses its array.
func Start[A, R any](queue int, run func(batch []*Call[A, R]) (carry []*Call[A, R])) *Committer[A, R] {
	c := &Committer[A, R]{
		queue:   make(chan *Call[A, R], queue),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		run:     run,
	}
	go c.loop()
	return c
}

// loop runs batches (the carry, then the calls waiting) until Close finds
// it with no carry.
func (c *Committer[A, R]) loop() {
	defer close(c.stopped)
	batch := make([]*Call[A, R], 0, MaxBatch)
	var carry []*Call[A, R]
	for {
		batch = append(batch[:0], carry...)
		if len(batch) == 0 {
			select {
			case call := <-c.queue:
				batch = append(batch, call)
			case <-c.stop:
				return
			}
		}
	more:
		for len(batch) < MaxBatch {
			select {
			case call := <-c.queue:
				batch = append(batch, call)
			default:
				break more
			}
		}
		carry = c.run(batch)
	}
}

// Do hands arg to the committer and returns its answer once its batch has
// run, or ErrClosed if the committer stopped without taking it.
func (c *Committer[A, R]) Do(arg A) (R, error) {
	call := NewCall[A, R](arg)
	var none R
	select {
	case c.queue <- call:
	case <-c.stopped:
		return none, ErrClosed
	}
	select {
	case r := <-call.done:
		return r, nil
	case <-c.stopped:
		// Every call taken is answered before stopping: without an
		// answer, this one was left in the queue.
		select {
		case r := <-call.done:
			return r, nil
		default:
			return none, ErrClosed
		}
	}
}

// Queued returns how many calls wait in the queue, not yet taken.
func (c *Committer[A, R]) Queued() int { return len(c.queue) }

// Close stops the committer once the batch in progress and any carry have
// run, and waits for it; calls still queued get ErrClosed.
func (c *Committer[A, R]) Close() {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped
}
