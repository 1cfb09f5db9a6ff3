package proxy

import (
	"net"
	"sync"
	"time"
)

// Connections to the replica kept alive between exchanges.
const (
	maxIdle = 64 // at most this many kept at once
	// idleTimeout is how long one is kept unused: shorter than the idle
	// limits of common servers (Node's 5 s, gunicorn's 2 s), so that the
	// replica does not close one just as a request is written on it. A
	// request is never sent twice: one written on a connection the
	// replica closed anyway ends with no reply, like one to a replica
	// that went away.
	idleTimeout = time.Second
)

// An idlePool keeps the replica's connections that finished an exchange
// cleanly for the next exchange to the same address.
type idlePool struct {
	mu     sync.Mutex
	conns  []idleConn  // oldest first
	sweep  *time.Timer // closes what waited idleTimeout; nil with nothing kept
	closed bool
}

type idleConn struct {
	conn  net.Conn
	addr  string
	since time.Time
}

// get returns a kept connection to addr still open at the replica's end,
// the most recently used first, or nil.
func (p *idlePool) get(addr string) net.Conn {
	for {
		p.mu.Lock()
		n := len(p.conns)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.conns[n-1]
		p.conns[n-1] = idleConn{}
		p.conns = p.conns[:n-1]
		p.mu.Unlock()
		if c.addr == addr && time.Since(c.since) < idleTimeout && open(c.conn) {
			return c.conn
		}
		c.conn.Close()
	}
}

// put keeps c, a connection to addr, and reports whether it did; the
// caller closes one it did not keep.
func (p *idlePool) put(addr string, c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if len(p.conns) == maxIdle {
		p.conns[0].conn.Close()
		p.conns = append(p.conns[:0], p.conns[1:]...)
	}
	p.conns = append(p.conns, idleConn{conn: c, addr: addr, since: time.Now()})
	if p.sweep == nil {
		p.sweep = time.AfterFunc(idleTimeout, p.expire)
	}
	return true
}

// expire closes every connection kept idleTimeout or longer, and runs
// again when the oldest left is due.
func (p *idlePool) expire() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.conns) && now.Sub(p.conns[n].since) >= idleTimeout {
		p.conns[n].conn.Close()
		n++
	}
	p.conns = append(p.conns[:0], p.conns[n:]...)
	if len(p.conns) == 0 || p.closed {
		p.sweep = nil
		return
	}
	p.sweep.Reset(idleTimeout - now.Sub(p.conns[0].since))
}

// drain closes every kept connection.
func (p *idlePool) drain() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.conn.Close()
	}
}

// close drains the pool and keeps nothing after.
func (p *idlePool) close() {
	p.mu.Lock()
	p.closed = true
	if p.sweep != nil {
		p.sweep.Stop()
	}
	p.mu.Unlock()
	p.drain()
}
