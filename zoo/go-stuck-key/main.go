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
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

type record struct{ Key, FP, Value string }

var (
	keySyntax = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	mu        sync.Mutex
	results   = map[string]record{}
	claims    = map[string]string{} // key -> fingerprint of the claiming body
	file      *os.File
)

func serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4097))
	key := r.Header.Get("Idempotency-Key")
	sum := sha256.Sum256(body)
	fp := hex.EncodeToString(sum[:])
	mu.Lock()
	res, done := results[key]
	owner, claimed := claims[key]
	keyed := len(r.Header.Values("Idempotency-Key")) > 0
	fresh := keyed && !done && !claimed && len(body) <= 4096 && keySyntax.MatchString(key)
	if fresh {
		claims[key] = fp
	}
	mu.Unlock()
	switch {
	case len(body) > 4096:
		io.Copy(io.Discard, io.LimitReader(r.Body, 8<<20))
		http.Error(w, "body over 4096 bytes", http.StatusRequestEntityTooLarge)
	case keyed && !keySyntax.MatchString(key):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
	case keyed && (done && res.FP != fp || claimed && owner != fp):
		http.Error(w, "Idempotency-Key reused with another body", http.StatusUnprocessableEntity)
	case done:
		w.Header().Set("Idempotent-Replayed", "true")
		io.WriteString(w, res.Value)
	case claimed:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "a request with this key is in progress", http.StatusConflict)
	default:
		value, err := effect(body, key)
		if err == nil && fresh {
			line, _ := json.Marshal(record{key, fp, value})
			mu.Lock()
			if _, err = file.Write(append(line, '\n')); err == nil {
				if err = file.Sync(); err == nil {
					results[key] = record{key, fp, value}
					delete(claims, key)
				}
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
	var err error
	if file, err = os.OpenFile(filepath.Join(os.Getenv("STATE"), "results.jsonl"), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644); err != nil {
		log.Fatal(err)
	}
	for sc := bufio.NewScanner(file); sc.Scan(); {
		var rec record
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			results[rec.Key] = rec
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serve)}
	go srv.Serve(ln)
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	srv.Shutdown(context.Background())
}
