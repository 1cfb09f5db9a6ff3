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
	"io"
	"net/http"
	"sync"

	"idemlab/zoo/zoohttp"
)

type store struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex // one per key, held by the key's owner
	results map[string]string      // key -> the effect's value
	file    *zoohttp.Journal[map[string]string]
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, ok := zoohttp.ReadRequest(w, r, zoohttp.KeySyntax)
	if !ok {
		return
	}
	key, keyed := req.Key, req.Keyed
	if keyed {
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
	value, err := zoohttp.Effect(req.Body, key)
	if err == nil && keyed {
		s.mu.Lock()
		if err = s.file.Append(map[string]string{"key": key, "value": value}); err == nil {
			s.results[key] = value
		}
		s.mu.Unlock()
	}
	if err != nil {
		http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
		return
	}
	io.WriteString(w, value)
}

func main() {
	s := &store{locks: map[string]*sync.Mutex{}, results: map[string]string{}}
	s.file = zoohttp.LoadJournal("results.jsonl", func(rec map[string]string) { s.results[rec["key"]] = rec["value"] })
	zoohttp.Serve(s)
}
