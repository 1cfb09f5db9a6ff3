// Command go-created is a sound member of the idemlab zoo: net/http, a
// mutex-guarded map of results kept in an append-only file, and one channel
// per key in flight that duplicates wait on before they replay. Success is
// 201 Created; only a replay carries a marker (Idempotent-Replayed: true).
// The key is forwarded to the effect sink, so an effect whose reply was lost
// (a crash, a 500 after the effect) is not applied again by a retry.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
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

type result struct {
	Key   string
	FP    [32]byte
	Value string
}

var (
	keySyntax = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	mu        sync.Mutex
	results   = map[string]result{}
	flights   = map[string]chan struct{}{} // closed when the key's owner ends
	owners    = map[string][32]byte{}      // the owner's body fingerprint
	file      *os.File                     // results, one JSON line each, synced before the reply
)

func serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4097))
	key, keyed := r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	switch {
	case len(body) > 4096:
		io.Copy(io.Discard, io.LimitReader(r.Body, 8<<20))
		http.Error(w, "body over 4096 bytes", http.StatusRequestEntityTooLarge)
		return
	case keyed && !keySyntax.MatchString(key):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
		return
	case !keyed:
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
	value, err := effect(body, key)
	if key != "" {
		mu.Lock()
		if err == nil {
			line, _ := json.Marshal(result{key, fp, value})
			if _, err = file.Write(append(line, '\n')); err == nil {
				if err = file.Sync(); err == nil {
					results[key] = result{key, fp, value}
				}
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

// effect posts the body to the sink, forwarding the key, on a context of
// its own: a client that gives up does not cancel an effect under way.
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
		var r result
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			results[r.Key] = r
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
