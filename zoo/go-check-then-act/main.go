// Command go-check-then-act is a flawed member of the idemlab zoo, with one
// flaw: it looks the key up, runs the effect, and records the key only
// after the effect. Duplicates that arrive while the first request runs
// find no record and apply the effect again.
//
// Everything else is as a volatile service should be: 422 for another body,
// 400 and 413 for bad input, a marker on replays only
// (Idempotency-Replayed: true). It keeps its keys in memory (its
// claims say so) and forwards no key: a forwarded key would let the sink
// absorb the race this member is here to show.
package main

import (
	"crypto/sha256"
	"io"
	"net/http"
	"sync"

	"idemlab/zoo/zoohttp"
)

type result struct {
	fp    [32]byte
	value string
}

var (
	mu      sync.Mutex
	results = map[string]result{}
)

func serve(w http.ResponseWriter, r *http.Request) {
	req, ok := zoohttp.ReadRequest(w, r, zoohttp.KeySyntax)
	if !ok {
		return
	}
	key, keyed, fp := req.Key, req.Keyed, sha256.Sum256(req.Body)
	if keyed {
		mu.Lock()
		res, ok := results[key] // check ...
		mu.Unlock()
		switch {
		case ok && res.fp != fp:
			http.Error(w, "Idempotency-Key reused with another body", http.StatusUnprocessableEntity)
			return
		case ok:
			w.Header().Set("Idempotency-Replayed", "true")
			io.WriteString(w, res.value)
			return
		}
	}
	value, err := zoohttp.Effect(req.Body, "") // ... then act, unguarded; no key forwarded
	if err != nil {
		http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
		return
	}
	if keyed {
		mu.Lock()
		if _, ok := results[key]; !ok {
			results[key] = result{fp, value}
		}
		mu.Unlock()
	}
	io.WriteString(w, value)
}

func main() { zoohttp.Serve(http.HandlerFunc(serve)) }
