package main

// Tests of what a hostile or careless user can do to a server: state
// folders it must refuse, a second server on a folder, clients that stall,
// a shutdown while a request stalls.

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/effectserver"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/open"
	"idemlab/internal/store/storetest"
)

// exitsWith checks that s exited with status code and one line on stderr
// holding every want, and printed nothing on stdout.
func exitsWith(t *testing.T, s *server, code int, want ...string) {
	t.Helper()
	if got := s.wait(); got != code {
		t.Fatalf("exit status = %d, want %d; stderr:\n%s", got, code, s.stderr)
	}
	<-s.copied
	got := s.stderr.String()
	if strings.Count(got, "\n") != 1 {
		t.Errorf("stderr = %q, want one line", got)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("stderr = %q, want it to say %q", got, w)
		}
	}
	if got := s.stdout.String(); got != "" {
		t.Errorf("stdout = %q, want nothing", got)
	}
}

// refused checks that s refused to start on its state or address: exit 3
// (effectserver.ExitRefused), one line on stderr holding every want.
func refused(t *testing.T, s *server, want ...string) {
	t.Helper()
	exitsWith(t, s, effectserver.ExitRefused, want...)
}

// Ensure a second volatile server on a folder in use exits 3 naming the
// folder, and that the folder is free again once the first is killed -9
// (the kernel drops the lock with the process).
func TestVolatileFolderLocked(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, true, "-state", dir)
	if status, body, _ := first.post("k", ""); status != 200 || body != "1" {
		t.Fatalf("POST = %d %q, want 200 1", status, body)
	}
	refused(t, startServer(t, false, "-state", dir), dir, "another server holds it")
	first.cmd.Process.Kill()
	first.wait()
	third := startServer(t, true, "-state", dir)
	if status, body, _ := third.post("k2", ""); status != 200 || body != "2" {
		t.Fatalf("POST after the restart = %d %q, want 200 2", status, body)
	}
	if got := third.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, third.stderr)
	}
}

// durableFolder makes a durable state folder in dir holding the keys, then
// runs stmts on its database behind the store's back.
func durableFolder(t *testing.T, dir string, keys []string, stmts string) {
	t.Helper()
	s, err := durable.Open(dir, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := s.Apply(store.Intent{Key: k, Fingerprint: store.FingerprintOf([]byte(k))}, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if stmts != "" {
		storetest.SQLiteExec(t, filepath.Join(dir, durable.FileName), stmts)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileSum is the SHA-256 of the file at path.
func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Ensure state folders the server cannot use as they are make it exit 3
// with one line naming the file and what is wrong, and leave the file as
// it was: none of them may silently start from zero.
func TestStateFolderRefused(t *testing.T) {
	db := durable.FileName
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		args  []string
		file  string // the file named
		want  string
	}{
		{"empty database", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, db), "") },
			[]string{"-store", "durable"}, db, "empty (0 bytes)"},
		{"volatile folder as durable", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "counter"), "1\n")
			writeFile(t, filepath.Join(dir, "effects.log"), "1 "+strings.Repeat("ab", 32)+"\n")
		}, []string{"-store", "durable"}, "counter", "belongs to the volatile store"},
		{"durable folder as volatile", func(t *testing.T, dir string) { durableFolder(t, dir, []string{"k"}, "") },
			[]string{"-store", "volatile"}, db, "belongs to the durable store"},
		{"foreign database", func(t *testing.T, dir string) {
			storetest.SQLiteExec(t, filepath.Join(dir, db), `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO accounts VALUES (1, 100)`)
		}, []string{"-store", "durable"}, db, "not an idemlab state database"},
		{"counter without journal", func(t *testing.T, dir string) { durableFolder(t, dir, nil, `UPDATE state SET counter = 500`) },
			[]string{"-store", "durable"}, db, "counter holds 500, but 0 effects are journaled"},
		{"capacity below the recorded keys", func(t *testing.T, dir string) { durableFolder(t, dir, []string{"a", "b", "c"}, "") },
			[]string{"-store", "durable", "-capacity", "2"}, db, "3 keys recorded, more than the capacity of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			path := filepath.Join(dir, tt.file)
			before := fileSum(t, path)
			refused(t, startServer(t, false, append([]string{"-state", dir}, tt.args...)...), path, tt.want)
			if fileSum(t, path) != before {
				t.Errorf("%s changed", path)
			}
		})
	}
}

// Ensure a volatile server is refused on a folder durable servers run on,
// and a durable server on a folder a volatile server runs on, each exiting
// 3 naming the folder; durable servers still share a folder.
func TestStoresExcludeEachOther(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, true, "-state", dir, "-store", "durable")
	b := startServer(t, true, "-state", dir, "-store", "durable")
	refused(t, startServer(t, false, "-state", dir), dir, "another server holds it")
	for _, s := range []*server{a, b} {
		if got := s.stop(); got != 0 {
			t.Fatalf("durable server exit status = %d, want 0; stderr:\n%s", got, s.stderr)
		}
	}

	dir = t.TempDir()
	v := startServer(t, true, "-state", dir)
	refused(t, startServer(t, false, "-state", dir, "-store", "durable"), dir, "a volatile server holds it")
	if got := v.stop(); got != 0 {
		t.Fatalf("volatile server exit status = %d, want 0; stderr:\n%s", got, v.stderr)
	}
}

// Ensure SIGTERM with a client stalled in the middle of its body still
// shuts down cleanly: exit 0, well within the deadline.
func TestStalledBodyShutdownExits0(t *testing.T) {
	t.Parallel()
	s := startServer(t, true, "-state", t.TempDir())
	servertest.Stall(t, s.addr, deadline, true)
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
	}
}

// Ensure a stalled client's connection is cut: the server stops reading
// and closes it, however long the client keeps it open.
func TestStalledBodyIsCut(t *testing.T) {
	t.Parallel()
	s := startServer(t, true, "-state", t.TempDir())
	c := servertest.Stall(t, s.addr, deadline, true)
	c.SetReadDeadline(time.Now().Add(deadline))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("stalled connection not closed by the server within %v: %v", deadline, err)
	}
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
	}
}

// Ensure clients that stall mid-body cannot starve the server of file
// descriptors: with an open-file limit of 256, 300 stalled connections
// used to leave every later request waiting for ever. A normal request
// must still be served once stallers are cut.
func TestStallersDoNotStarve(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 300 connections and waits for them to be cut")
	}
	t.Parallel()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < 400 {
		t.Skipf("needs an open-file limit of 400 or more for its clients (%+v, %v)", lim, err)
	}
	s := startLimited(t, 256, "-state", t.TempDir())
	for range 300 {
		servertest.Stall(t, s.addr, deadline, false)
	}
	began := time.Now()
	if status, body, _ := s.post("", ""); status != 200 || body != "1" {
		t.Fatalf("POST behind 300 stalled connections = %d %q, want 200 1; stderr:\n%s", status, body, tail(s.stderr.String()))
	}
	t.Logf("served %v after the 300 stalled connections", time.Since(began).Round(time.Millisecond))
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, tail(s.stderr.String()))
	}
}

// tail is the last lines of a log.
func tail(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// startLimited starts effectserver, as startServer does, with an open-file
// limit of nofile (soft and hard, so that the Go runtime cannot raise it),
// and waits for its READY line.
func startLimited(t *testing.T, nofile int, args ...string) *server {
	t.Helper()
	return launch(t, exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), os.Args[0]}, args...)...), true)
}

// Ensure an -addr whose port is taken is refused, not a usage error: exit
// 3, one line naming the address.
func TestPortInUseExits3(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	refused(t, startServer(t, false, "-state", t.TempDir(), "-addr", addr), "-addr "+addr, "address already in use")
}

// Ensure a volatile state folder whose counter or journal is not a regular
// file (a FIFO, a symlink to /dev/zero or to a regular file) is refused at
// start, exit 3 naming the file, instead of hanging before READY deaf to
// SIGTERM (a FIFO) or reading without end (/dev/zero: 164 -> 615 MB in a
// second, as found by a probe).
func TestVolatileSpecialFilesRefused(t *testing.T) {
	line := "1 " + strings.Repeat("ab", 32) + "\n"
	tests := []struct {
		name, file string
		make       func(t *testing.T, path string)
		want       string
	}{
		{"counter a FIFO", "counter", mkfifo, "a FIFO"},
		{"journal a FIFO", "effects.log", mkfifo, "a FIFO"},
		{"counter a link to /dev/zero", "counter", symlink("/dev/zero"), "a symlink"},
		{"journal a link to /dev/zero", "effects.log", symlink("/dev/zero"), "a symlink"},
		{"journal a link to a regular file", "effects.log", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "journal")
			writeFile(t, target, line)
			symlink(target)(t, path)
		}, "a symlink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "counter"), "1\n")
			writeFile(t, filepath.Join(dir, "effects.log"), line)
			path := filepath.Join(dir, tt.file)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			tt.make(t, path)
			refused(t, startServer(t, false, "-state", dir), path, "not a regular file", tt.want)
		})
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(target string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
}

// Ensure a volatile journal's tail without a newline is cut at start only
// when it can be one torn record, with a log line saying what was cut; a
// larger tail, or one that is no record's beginning, is refused (exit 3,
// naming the file and the byte count) and left as it was. A probe saw 300
// MB of garbage after the last record deleted without a word.
func TestVolatileJournalTail(t *testing.T) {
	line := "1 " + strings.Repeat("ab", 32) + "\n"
	torn := "2 " + strings.Repeat("cd", 20)
	t.Run("torn record cut and logged", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "counter"), "1\n")
		path := filepath.Join(dir, "effects.log")
		writeFile(t, path, line+torn)
		s := startServer(t, true, "-state", dir)
		if got := s.stop(); got != 0 {
			t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
		}
		<-s.copied
		if log, want := s.stderr.String(), fmt.Sprintf("cut a torn record of %d bytes after line 1", len(torn)); !strings.Contains(log, want) || !strings.Contains(log, path) {
			t.Errorf("log lacks %q naming %s:\n%s", want, path, log)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != line {
			t.Errorf("journal after start = %q, %v, want %q", b, err, line)
		}
	})
	for _, tt := range []struct {
		name, tail string
	}{
		{"a megabyte of garbage", strings.Repeat("x", 1<<20)},
		{"more than one record's length", "2 " + strings.Repeat("c", 100)},
		{"short, but no record's beginning", "garbage"},
	} {
		t.Run(tt.name+" refused", func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "counter"), "1\n")
			path := filepath.Join(dir, "effects.log")
			writeFile(t, path, line+tt.tail)
			before := fileSum(t, path)
			refused(t, startServer(t, false, "-state", dir), path, fmt.Sprintf("%d bytes after line 1", len(tt.tail)))
			if fileSum(t, path) != before {
				t.Errorf("%s changed", path)
			}
		})
	}
}

// rawExchange writes req on a new connection to addr while reading the
// reply (a server refusing a request may reply before it has read it all)
// and returns the reply's status line and everything after it.
func rawExchange(t *testing.T, addr string, req []byte) (status, rest string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Write(req) // fails once the server has closed: the reply is what counts
	c.SetReadDeadline(time.Now().Add(deadline))
	r := bufio.NewReader(c)
	status, err = r.ReadString('\n')
	if err != nil {
		t.Fatalf("no reply: %q, %v", status, err)
	}
	b, _ := io.ReadAll(r) // up to the close (or a reset after it)
	return strings.TrimSuffix(status, "\r\n"), string(b)
}

// Ensure what a hostile client sends is bounded in what it costs and in
// what comes back: request headers past 16 KiB get 431 (a probe had a 1 MiB
// header and 10,000 headers served), headers under it are served, a long
// path is logged cut with a marker (a 1 MB path was one 1 MB log line), and
// a 400 for an unknown fault quotes at most 128 bytes of it (the whole
// 100 kB value came back).
func TestHostileRequestsBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t, true, "-state", t.TempDir(), "-faults")
	post := func(path, headers string) []byte {
		return []byte("POST " + path + " HTTP/1.1\r\nHost: x\r\n" + headers + "Content-Length: 7\r\nConnection: close\r\n\r\nadd-one")
	}
	var many strings.Builder
	for i := range 10_000 {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	for _, tt := range []struct {
		name, want string
		req        []byte
	}{
		{"a 1 MiB header", "HTTP/1.1 431 ", post("/effect", "X-Big: "+strings.Repeat("x", 1<<20)+"\r\n")},
		{"10,000 headers", "HTTP/1.1 431 ", post("/effect", many.String())},
		{"a 1 MiB path", "HTTP/1.1 431 ", post("/"+strings.Repeat("p", 1<<20), "")},
		{"a 15 KiB header", "HTTP/1.1 200 ", post("/effect", "X-Big: "+strings.Repeat("x", 15<<10)+"\r\n")},
	} {
		if status, _ := rawExchange(t, s.addr, tt.req); !strings.HasPrefix(status, tt.want) {
			t.Errorf("%s: reply %q, want %q", tt.name, status, tt.want)
		}
	}
	path := "/" + strings.Repeat("p", 10_000)
	if status, _ := rawExchange(t, s.addr, post(path, "")); !strings.HasPrefix(status, "HTTP/1.1 404 ") {
		t.Errorf("a 10,000-byte path: reply %q, want 404", status)
	}
	fault := strings.Repeat("q", 10_000)
	status, rest := rawExchange(t, s.addr, post("/effect", "X-Lab-Fault: "+fault+"\r\n"))
	_, body, _ := strings.Cut(rest, "\r\n\r\n")
	if want := "X-Lab-Fault: unknown fault \"" + fault[:128] + "\"...\n"; !strings.HasPrefix(status, "HTTP/1.1 400 ") || body != want {
		t.Errorf("an unknown 10,000-byte fault: reply %q %q, want 400 %q", status, body, want)
	}
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, tail(s.stderr.String()))
	}
	<-s.copied
	log := s.stderr.String()
	if want := `path="/` + strings.Repeat("p", 255) + `...(10001 bytes)"`; !strings.Contains(log, want) {
		t.Errorf("log lacks the path cut at 256 bytes with its length:\n%.2000s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if len(line) > 1024 {
			t.Errorf("log line of %d bytes: %.200q...", len(line), line)
		}
	}
}

// Ensure the shutdown grace holds on every store: SIGTERM during a request
// stalled for 60 s (stall=60000ms: its effect done, its result not
// recorded) exits 0 at the grace, not when the stall ends (a probe saw 59 s
// on durable, 29 s on postgres), and the cut stall is rolled back where the
// store has a transaction: the effect is not applied and the key not
// recorded, so a retry after a restart is the key's first effect. The
// volatile store has none: its effect was durable before the stall, and
// only the key is lost (as a restart loses every volatile key).
func TestShutdownCutsStall(t *testing.T) {
	t.Parallel()
	tests := []struct {
		store   protocol.Store
		counter int64 // after the cut
	}{
		{protocol.Volatile, 1},
		{protocol.Durable, 0},
		{protocol.Postgres, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.store), func(t *testing.T) {
			t.Parallel()
			place := open.Place{Dir: t.TempDir()}
			args := []string{"-store", string(tt.store), "-faults"}
			if tt.store.InDatabase() {
				place.DSN = pgclustertest.Database(t)
				args = append(args, "-dsn", place.DSN)
			} else {
				args = append(args, "-state", place.Dir)
			}
			s := startServer(t, true, args...)
			c := servertest.InFlight(t, s.addr, deadline, "k", "stall=60000ms")
			began := time.Now()
			if got := s.stop(); got != 0 {
				t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
			}
			t.Logf("%s: exited %v after SIGTERM", tt.store, time.Since(began).Round(10*time.Millisecond))
			servertest.NoReply(t, c, deadline)
			<-s.copied
			if log := s.stderr.String(); !strings.Contains(log, "key=k") || !strings.Contains(log, "outcome=cut") {
				t.Errorf("log does not say the stalled request was cut:\n%s", log)
			}
			if got := servertest.State(t, tt.store, place).Counter; got != tt.counter {
				t.Fatalf("counter after the cut = %d, want %d", got, tt.counter)
			}
			s2 := startServer(t, true, args...)
			want := fmt.Sprint(tt.counter + 1)
			if status, body, replayed := s2.post("k", ""); status != 200 || body != want || replayed != "false" {
				t.Errorf("retry after restart = %d %q replayed %q, want 200 %s false (the key not recorded)", status, body, replayed, want)
			}
			if got := s2.stop(); got != 0 {
				t.Fatalf("exit status after SIGTERM = %d, want 0", got)
			}
		})
	}
}
