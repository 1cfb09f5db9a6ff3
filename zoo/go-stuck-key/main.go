// Command go-stuck-key is a flawed member of the idemlab zoo, with one flaw:
// when the effect fails it answers 502 but never releases the key's claim,
// so every retry of that key is told 409 (with Retry-After) for as long as
// the process lives: the effect is never applied.
//
// Everything else is sound: results in an append-only file, synced before
// the reply; 409 with Retry-After while the owner runs; 422 for another
// body; the key forwarded to the sink; Idempotent-Replayed: true on replays.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"sync"

	"idemlab/zoo/zoohttp"
)

type record struct{ Key, FP, Value string }

var (
	mu      sync.Mutex
	results = map[string]record{}
	claims  = map[string]string{} // key -> fingerprint of the claiming body
	file    *zoohttp.Journal[record]
)

func serve(w http.ResponseWriter, r *http.Request) {
	req, ok := zoohttp.ReadRequest(w, r, zoohttp.KeySyntax)
	if !ok {
		return
	}
	body, key, keyed := req.Body, req.Key, req.Keyed
	sum := sha256.Sum256(body)
	fp := hex.EncodeToString(sum[:])
	mu.Lock()
	res, done := results[key]
	owner, claimed := claims[key]
	fresh := keyed && !done && !claimed
	if fresh {
		claims[key] = fp
	}
	mu.Unlock()
	switch {
	case keyed && (done && res.FP != fp || claimed && owner != fp):
		http.Error(w, "Idempotency-Key reused with another body", http.StatusUnprocessableEntity)
	case done:
		w.Header().Set("Idempotent-Replayed", "true")
		io.WriteString(w, res.Value)
	case claimed:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "a request with this key is in progress", http.StatusConflict)
	default:
		value, err := zoohttp.Effect(body, key)
		if err == nil && fresh {
			mu.Lock()
			if err = file.Append(record{key, fp, value}); err == nil {
				results[key] = record{key, fp, value}
				delete(claims, key)
			}
			mu.Unlock()
		}
		if err != nil { // the flaw: the claim stays, the key is stuck
			http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, value)
	}
}

func main() {
	file = zoohttp.LoadJournal("results.jsonl", func(rec record) { results[rec.Key] = rec })
	zoohttp.Serve(http.HandlerFunc(serve))
}
