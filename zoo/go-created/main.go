// Command go-created is a sound member of the idemlab zoo: net/http, a
// mutex-guarded map of results kept in an append-only file, and one channel
// per key in flight that duplicates wait on before they replay. Success is
// 201 Created; only a replay carries a marker (Idempotent-Replayed: true).
// The key is forwarded to the effect sink, so an effect whose reply was lost
// (a crash, a 500 after the effect) is not applied again by a retry.
package main

import (
	"crypto/sha256"
	"io"
	"net/http"
	"sync"
	"time"

	"idemlab/zoo/zoohttp"
)

type result struct {
	Key   string
	FP    [32]byte
	Value string
}

var (
	mu      sync.Mutex
	results = map[string]result{}
	flights = map[string]chan struct{}{} // closed when the key's owner ends
	owners  = map[string][32]byte{}      // the owner's body fingerprint
	file    *zoohttp.Journal[result]     // results, one JSON line each, synced before the reply
)

func serve(w http.ResponseWriter, r *http.Request) {
	req, ok := zoohttp.ReadRequest(w, r, zoohttp.KeySyntax)
	if !ok {
		return
	}
	body, key := req.Body, req.Key
	if !req.Keyed {
		apply(w, body, "", [32]byte{})
		return
	}
	fp := sha256.Sum256(body)
	for deadline := time.After(4 * time.Second); ; {
		mu.Lock()
		res, recorded := results[key]
		done, running := flights[key]
		owner := owners[key]
		if !recorded && !running {
			flights[key], owners[key] = make(chan struct{}), fp
		}
		mu.Unlock()
		switch {
		case recorded && res.FP != fp, running && owner != fp:
			http.Error(w, "Idempotency-Key reused with another body", http.StatusUnprocessableEntity)
		case recorded:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, res.Value)
		case running:
			select {
			case <-done:
				continue // recorded, or released by a failed owner: look again
			case <-deadline:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "a request with this key is in progress", http.StatusConflict)
			}
		default:
			apply(w, body, key, fp)
		}
		return
	}
}

// apply performs the effect, records a keyed result before answering, and
// ends the key's flight either way (a failure releases the key).
func apply(w http.ResponseWriter, body []byte, key string, fp [32]byte) {
	value, err := zoohttp.Effect(body, key)
	if key != "" {
		mu.Lock()
		if err == nil {
			if err = file.Append(result{key, fp, value}); err == nil {
				results[key] = result{key, fp, value}
			}
		}
		close(flights[key])
		delete(flights, key)
		mu.Unlock()
	}
	if err != nil {
		http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, value)
}

func main() {
	file = zoohttp.LoadJournal("results.jsonl", func(r result) { results[r.Key] = r })
	zoohttp.Serve(http.HandlerFunc(serve))
}
