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
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"sync"
	"syscall"
	"time"
)

type result struct {
	fp    [32]byte
	value string
}

var (
	keySyntax = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	mu        sync.Mutex
	results   = map[string]result{}
)

func serve(w http.ResponseWriter, r *http.Request) {
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
	}
	fp := sha256.Sum256(body)
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
	value, err := effect(body) // ... then act, unguarded
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

// effect posts the body to the sink on a context of its own.
func effect(body []byte) (string, error) {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(os.Getenv("EFFECT_URL"), "text/plain", bytes.NewReader(body))
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
