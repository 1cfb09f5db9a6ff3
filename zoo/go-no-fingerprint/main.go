// Command go-no-fingerprint is a flawed member of the idemlab zoo, with one
// flaw: it keeps no fingerprint of the body, so a key reused with another
// body is answered with the first body's result, as if it were a replay.
//
// Everything else is sound, in a style of its own: one mutex per key, held
// across the effect, so a duplicate queues behind its owner and replays;
// results in an append-only file, synced before the reply; the key
// forwarded to the sink; X-Replayed: 1 on replays only.
package main

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
	"sync"
	"syscall"
	"time"
)

type store struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex // one per key, held by the key's owner
	results map[string]string      // key -> the effect's value
	file    *os.File
}

var keySyntax = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4097))
	key := r.Header.Get("Idempotency-Key")
	keyed := len(r.Header.Values("Idempotency-Key")) > 0
	switch {
	case len(body) > 4096:
		io.Copy(io.Discard, io.LimitReader(r.Body, 8<<20))
		http.Error(w, "body over 4096 bytes", http.StatusRequestEntityTooLarge)
		return
	case keyed && !keySyntax.MatchString(key):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
		return
	case keyed:
		s.mu.Lock()
		l := s.locks[key]
		if l == nil {
			l = new(sync.Mutex)
			s.locks[key] = l
		}
		s.mu.Unlock()
		l.Lock()
		defer l.Unlock()
		s.mu.Lock()
		value, done := s.results[key] // the flaw: the body is not compared
		s.mu.Unlock()
		if done {
			w.Header().Set("X-Replayed", "1")
			io.WriteString(w, value)
			return
		}
	}
	value, err := effect(body, key)
	if err == nil && keyed {
		line, _ := json.Marshal(map[string]string{"key": key, "value": value})
		s.mu.Lock()
		if _, err = s.file.Write(append(line, '\n')); err == nil {
			if err = s.file.Sync(); err == nil {
				s.results[key] = value
			}
		}
		s.mu.Unlock()
	}
	if err != nil {
		http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
		return
	}
	io.WriteString(w, value)
}

// effect posts the body to the sink, forwarding the key, on a context of
// its own.
func effect(body []byte, key string) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, os.Getenv("EFFECT_URL"), bytes.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
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

func main() {
	s := &store{locks: map[string]*sync.Mutex{}, results: map[string]string{}}
	var err error
	if s.file, err = os.OpenFile(filepath.Join(os.Getenv("STATE"), "results.jsonl"), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644); err != nil {
		log.Fatal(err)
	}
	for sc := bufio.NewScanner(s.file); sc.Scan(); {
		var rec map[string]string
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			s.results[rec["key"]] = rec["value"]
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	srv.Shutdown(context.Background())
}
