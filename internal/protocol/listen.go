package protocol

import (
	"net"
	"sync"
)

// A LimitListener accepts at most n connections open at once: one beyond
// the cap waits in the kernel's accept backlog, in arrival order, never
// refused.
type LimitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
}

// NewLimitListener returns l capped at n connections open at once.
func NewLimitListener(l net.Listener, n int) *LimitListener {
	return &LimitListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then accepts a connection that frees it
// when first closed. After Close it returns net.ErrClosed.
func (l *LimitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

// Close stops Accept, waiting or not, and closes the listener.
func (l *LimitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitConn is a connection holding a slot of its LimitListener.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
