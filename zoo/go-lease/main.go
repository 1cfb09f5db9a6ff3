// Command go-lease is a sound member of the idemlab zoo: keys live in an
// append-only file in {state}, shared by the replicas, read and appended
// under flock. A claim is a one-second lease that its owner renews while
// its effect runs; a duplicate waits (4 s at most, then 409) for the result
// or for the lease to run out, then takes the key over and runs the effect
// again, forwarding the key so that the sink does not apply it twice. A
// crashed owner stops renewing: its key is stuck for a second at most.
// PATCH; 200, Idempotent-Replayed: true on replays only; 64 keys at most.
package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"idemlab/zoo/zoohttp"
)

const lease = time.Second

var requests atomic.Int64 // numbers the owners of claims

// A rec is one line of the file; a key's last line is its state.
type rec struct {
	Key   string   `json:"k"`
	FP    [32]byte `json:"fp"`
	Owner string   `json:"owner,omitempty"`
	Until int64    `json:"until,omitempty"` // a claim's lease end, Unix ms
	Value *string  `json:"value,omitempty"` // the result; nil for a claim
	Freed bool     `json:"freed,omitempty"` // released after a failed effect
}

// locked reads the keys' states under an exclusive flock of the file and
// appends, synced, the records f returns.
func locked(f func(keys map[string]rec) []rec) {
	j, err := zoohttp.OpenJournal[rec]("keys.jsonl")
	if err == nil {
		defer j.Close()
		err = syscall.Flock(int(j.Fd()), syscall.LOCK_EX)
	}
	keys := map[string]rec{}
	if err == nil {
		err = j.Read(func(r rec) {
			keys[r.Key] = r
			if r.Freed {
				delete(keys, r.Key)
			}
		})
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := j.Append(f(keys)...); err != nil {
		log.Fatal("append to the keys file: ", err)
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	req, ok := zoohttp.ReadRequest(w, r, zoohttp.KeySyntax)
	if !ok {
		return
	}
	body, key := req.Body, req.Key
	fp, me := sha256.Sum256(body), fmt.Sprintf("%d.%d", os.Getpid(), requests.Add(1))
	if !req.Keyed {
		run(w, body, "", fp, me)
		return
	}
	for deadline := time.Now().Add(4 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, text, claimed := 0, "", false
		locked(func(keys map[string]rec) []rec {
			k, ok := keys[key]
			switch now := time.Now(); {
			case ok && k.FP != fp:
				status, text = http.StatusUnprocessableEntity, "Idempotency-Key reused with another body\n"
			case ok && k.Value != nil:
				status, text = http.StatusOK, *k.Value
				w.Header().Set("Idempotent-Replayed", "true")
			case ok && k.Until > now.UnixMilli() && now.After(deadline):
				status, text = http.StatusConflict, "a request with this key is in progress\n"
				w.Header().Set("Retry-After", "1")
			case ok && k.Until > now.UnixMilli(): // the owner's lease runs: wait
			case !ok && len(keys) >= 64:
				status, text = http.StatusTooManyRequests, "64 keys held\n"
			default: // a new key, or a lease run out: claim it
				claimed = true
				return []rec{{Key: key, FP: fp, Owner: me, Until: now.Add(lease).UnixMilli()}}
			}
			return nil
		})
		if claimed {
			run(w, body, key, fp, me)
			return
		} else if status != 0 {
			w.WriteHeader(status)
			io.WriteString(w, text)
			return
		}
	}
}

// run performs the effect. For a key, it renews me's lease meanwhile and
// records the result (or frees the key after a failure) before answering.
func run(w http.ResponseWriter, body []byte, key string, fp [32]byte, me string) {
	mine := func(f func(k rec) []rec) {
		locked(func(keys map[string]rec) []rec {
			if k := keys[key]; k.Owner == me && k.Value == nil {
				return f(k)
			}
			return nil
		})
	}
	stop := make(chan struct{})
	if key != "" {
		go func() {
			t := time.NewTicker(lease / 3)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					mine(func(k rec) []rec { k.Until = time.Now().Add(lease).UnixMilli(); return []rec{k} })
				}
			}
		}()
	}
	value, err := zoohttp.Effect(body, key)
	close(stop)
	switch {
	case key == "":
	case err != nil:
		mine(func(rec) []rec { return []rec{{Key: key, Freed: true}} })
	default: // recorded even if another took the key over meanwhile: the sink gave both one value
		locked(func(keys map[string]rec) []rec {
			if keys[key].Value == nil {
				return []rec{{Key: key, FP: fp, Owner: me, Value: &value}}
			}
			return nil
		})
	}
	if err != nil {
		http.Error(w, "effect failed: "+err.Error(), http.StatusBadGateway)
		return
	}
	io.WriteString(w, value)
}

func main() { zoohttp.Serve(http.HandlerFunc(serve)) }
