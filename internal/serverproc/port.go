package serverproc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a free loopback port for a server to be told to listen
// on (Spec.Addr). Between its return and the server's bind the port is
// free for anyone to take, and a connection to it then reaches whoever
// did. It used to bind port 0 and close it, so the kernel could hand the
// same port to the next draw, to any listener bound to port 0 (the lab's
// sinks, relays and proxies) or to any connection: once a target's TCP
// readiness probe reached another run's target on it, and the run's calls
// went there. So the port is drawn at random below the kernel's ephemeral
// ports, where no socket is handed a port it did not name, and a port
// this process handed out is not handed out again for portQuarantine,
// time enough for its server to bind it. Another process drawing the same
// port in the same moment is left to chance (about one in 20,000 a draw);
// StartSpec then finds that the listener is not the server's
// (listenerOf).
func FreePort() (int, error) {
	low := ephemeralLow()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	now := time.Now()
	for p, at := range ports.handed {
		if now.Sub(at) > portQuarantine {
			delete(ports.handed, p)
		}
	}
	for range drawTries {
		p := minPort + rand.IntN(low-minPort)
		if _, recent := ports.handed[p]; recent {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use, or not ours to bind
		}
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("free port: close %d: %w", p, err)
		}
		ports.handed[p] = now
		return p, nil
	}
	return 0, fmt.Errorf("free port: none free between %d and %d in %d tries", minPort, low-1, drawTries)
}

// The ports FreePort draws from and how hard it tries.
const (
	minPort        = 10000 // above the well-known and most registered ports
	drawTries      = 200
	portQuarantine = time.Minute
)

// ports are the ports FreePort handed out, by when.
var ports = struct {
	mu     sync.Mutex
	handed map[int]time.Time
}{handed: map[int]time.Time{}}

// ephemeralLow is the first of the kernel's ephemeral ports (Linux's
// ip_local_port_range; 32768, its default, where that cannot be read or
// leaves too few ports below it).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n >= minPort+1000 {
				low = n
			}
		}
	}
	return low
}

// A PortTakenError is a server that could not have the port the lab told
// it: another process listened there first. It is the lab's failure, not
// the server's, and a start on another port may succeed.
type PortTakenError struct {
	Addr   string
	Holder string // who listens there (processName)
	Err    error  // what Start saw of the server
}

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("%s is listened on by %s, not by the server (a port the lab drew was taken before the server bound it): %v", e.Addr, e.Holder, e.Err)
}

func (e *PortTakenError) Unwrap() error { return e.Err }

// A listener is whose the socket listening on a server's port is.
type listener struct {
	ours   bool   // one of the server's processes holds it
	holder string // another process holds it (processName)
	known  bool   // the kernel and /proc could tell; false elsewhere than Linux
}

// listenerOf says whose the socket listening on addr's port is. A process
// of s is the server, a member of its process group, or one carrying its
// mark. None may listen (any more): then neither ours nor a holder.
func (s *Server) listenerOf(addr string) listener {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return listener{}
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return listener{}
	}
	inodes := listeningInodes(port)
	if inodes == nil {
		return listener{}
	}
	if holds(s.PID, inodes) { // the usual case, and the cheapest to see
		return listener{ours: true, known: true}
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == s.PID || !holds(pid, inodes) {
			continue
		}
		if s.owns(pid) {
			return listener{ours: true, known: true}
		}
		cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		return listener{holder: processName(pid, cmd), known: true}
	}
	return listener{known: true}
}

// owns reports whether process pid is one of s's: in its process group or
// carrying its mark.
func (s *Server) owns(pid int) bool {
	if pg, err := syscall.Getpgid(pid); err == nil && s.group && pg == s.PID {
		return true
	}
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return bytes.Contains(append([]byte{0}, env...), []byte("\x00"+MarkEnv+"="+s.mark+"\x00"))
}

// holds reports whether process pid has one of inodes' sockets open.
func holds(pid int, inodes map[string]bool) bool {
	fds, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true
		}
	}
	return false
}
