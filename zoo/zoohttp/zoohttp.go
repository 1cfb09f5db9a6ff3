// Package zoohttp holds what every Go service of the idemlab zoo repeats and
// none of them is there to show: reading a request (its body, 4096 bytes at
// most, and a well-formed key), the effect call to the lab's sink, serving
// on 127.0.0.1:$PORT with the READY line and a graceful stop on SIGTERM, and
// an append-only JSON-lines file in $STATE. The idempotency logic, which the
// zoo exists to test, stays in each service, in the service's own style
// (zoo/README.md).
//
// It is written for the zoo's main packages: what a service's main calls
// (Serve, LoadJournal) ends the process when it cannot go on, as a main
// would; what a request calls returns its errors.
//
// A service's folder digest does not cover this package, so a change to it
// alone does not make the lab run a service's setup (its go build) again:
// the zoo's test runs every setup itself (zoo/README.md).
package zoohttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

// KeyHeader is the header a request carries its key in, and the header a
// service forwards the key to the sink in.
const KeyHeader = "Idempotency-Key"

// MaxBody is the largest body a zoo service takes (its claims' max_body).
const MaxBody = 4096

// KeySyntax is the key syntax of the services that keep the lab's own.
var KeySyntax = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// A Request is what ReadRequest read of a request.
type Request struct {
	Body  []byte
	Key   string
	Keyed bool // the request carries KeyHeader, whatever its value
}

// ReadRequest reads r's body (MaxBody bytes at most) and its key. It
// answers a larger body 413, reading on (8 MiB at most) so that the client
// sees the reply, and a key keySyntax does not match 400; then it returns
// false, and the caller is done.
func ReadRequest(w http.ResponseWriter, r *http.Request, keySyntax *regexp.Regexp) (Request, bool) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	req := Request{Body: body, Key: r.Header.Get(KeyHeader), Keyed: len(r.Header.Values(KeyHeader)) > 0}
	switch {
	case len(body) > MaxBody:
		io.Copy(io.Discard, io.LimitReader(r.Body, 8<<20))
		http.Error(w, fmt.Sprintf("body over %d bytes", MaxBody), http.StatusRequestEntityTooLarge)
		return req, false
	case req.Keyed && !keySyntax.MatchString(req.Key):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
		return req, false
	}
	return req, true
}

// client makes the sink calls: a timeout of its own, no request's context.
var client = &http.Client{Timeout: 30 * time.Second}

// Effect posts body to the sink at $EFFECT_URL, forwarding key in
// KeyHeader unless key is "", and returns the sink's value. Any reply but
// 200 is an error. The call runs on a context of its own (30 s at most),
// not the request's: a client that gives up does not cancel an effect
// under way.
func Effect(body []byte, key string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, os.Getenv("EFFECT_URL"), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set(KeyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("sink answered %d", resp.StatusCode)
	}
	return string(b), err
}

// Serve serves h on 127.0.0.1:$PORT, prints "READY <port>" once it
// listens, and returns when SIGTERM or an interrupt has shut the server
// down gracefully. It ends the process (log.Fatal) when it cannot listen.
func Serve(h http.Handler) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	<-ctx.Done()
	srv.Shutdown(context.Background())
}

// A Journal is an append-only file of T values in the folder $STATE, one
// JSON line each.
type Journal[T any] struct{ f *os.File }

// OpenJournal opens the journal name in $STATE for reading and appending,
// creating it.
func OpenJournal[T any](name string) (*Journal[T], error) {
	f, err := os.OpenFile(filepath.Join(os.Getenv("STATE"), name), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Journal[T]{f}, nil
}

// Fd is the file's descriptor, for a flock where processes share the
// journal.
func (j *Journal[T]) Fd() uintptr { return j.f.Fd() }

// Close closes the file.
func (j *Journal[T]) Close() error { return j.f.Close() }

// LoadJournal opens the journal name as OpenJournal does and reads it
// through each, for a service's main: like Serve, it ends the process
// (log.Fatal) when it cannot.
func LoadJournal[T any](name string, each func(T)) *Journal[T] {
	j, err := OpenJournal[T](name)
	if err == nil {
		err = j.Read(each)
	}
	if err != nil {
		log.Fatal(err)
	}
	return j
}

// Read passes each line from the file's offset on that decodes as a T to
// each, in order, decoded into a fresh T; a line that does not decode is
// skipped.
func (j *Journal[T]) Read(each func(T)) error {
	sc := bufio.NewScanner(j.f)
	for sc.Scan() {
		var v T
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			each(v)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", j.f.Name(), err)
	}
	return nil
}

// Append writes vs, one line each, in one write, and syncs the file before
// it returns; with no values it writes nothing. Its errors are the file's
// own (they name it).
func (j *Journal[T]) Append(vs ...T) error {
	var buf bytes.Buffer
	for _, v := range vs {
		line, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(append(line, '\n'))
	}
	if buf.Len() == 0 {
		return nil
	}
	if _, err := j.f.Write(buf.Bytes()); err != nil {
		return err
	}
	return j.f.Sync()
}
