// Package groupcommit is the committer that the durable and postgres
// stores share: one goroutine per store that takes every call waiting at
// one moment, up to MaxBatch, and hands them to the store as one batch,
// which the store runs in one transaction, so that the calls of a batch
// share one commit (group commit). Each caller waits for its own call's
// answer, which the store gives once the transaction holding it has
// committed or rolled back.
//
// What a batch does is the store's, written as a function run; the
// committer knows nothing of transactions. A store that cannot run every
// call of a batch together (the postgres store runs one intent per key in a
// batch) returns the others from run as a carry: they open the next batch,
// ahead of any new call. The committer stops only with no carry left, so
// every call it takes is answered.
package groupcommit

import (
	"errors"
	"sync"
)

// MaxBatch bounds how many calls share one batch.
const MaxBatch = 256

// ErrClosed is Do's error when the committer stopped without taking the
// call: nothing of it ran.
var ErrClosed = errors.New("committer closed")

// A Call is an argument handed to the committer and, once its batch has
// run, its answer.
type Call[A, R any] struct {
	Arg  A
	done chan R // buffered: the committer never waits for the caller
}

// NewCall returns a call of arg, not yet answered.
func NewCall[A, R any](arg A) *Call[A, R] {
	return &Call[A, R]{Arg: arg, done: make(chan R, 1)}
}

// Answer gives c its answer. A batch's run calls it once for every call of
// the batch that it does not carry.
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

// Start starts a committer whose queue holds up to queue calls (0: a call
// is handed over only when the committer takes it), and which hands each
// batch to run. run must answer every call of batch except those it
// returns as carry, in the order they are to run, and must not keep batch,
// whose array the next batch reuses.
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

// loop is the committer: it takes the calls waiting at that moment, after
// the last batch's carry, up to MaxBatch, and runs them as one batch, until
// Close finds it with no carry.
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
		// The committer answers every call it takes before it stops:
		// without an answer, this one was left in the queue.
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
