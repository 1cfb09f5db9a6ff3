package sinktest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"idemlab/internal/serverproc"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// Ensure a keyed target replays a key done, keeps it across a restart only
// with File keys, and is listed by Leftovers until it is killed.
func TestKeyedTargetAndLeftovers(t *testing.T) {
	var effects atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, effects.Add(1))
	}))
	defer sink.Close()
	call := func(tg *serverproc.Server, key string) string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+tg.Addr+"/pay", strings.NewReader("pay"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s %s", resp.StatusCode, b, resp.Header.Get("X-Replayed"))
	}
	for _, tc := range []struct {
		keys         Keys
		afterRestart string
	}{{Memory, "200 3 no"}, {File, "200 1 yes"}} {
		t.Run(string(tc.keys), func(t *testing.T) {
			effects.Store(0)
			opts := Options{Service: Service{Keys: tc.keys}, EffectURL: sink.URL, State: t.TempDir()}
			tg := StartTarget(t, opts)
			if got := call(tg, "a") + ", " + call(tg, "a") + ", " + call(tg, ""); got != "200 1 no, 200 1 yes, 200 2 no" {
				t.Errorf("calls: %s; want a new effect, its replay, and an unkeyed effect", got)
			}
			if left := strings.Join(Leftovers(), ","); !strings.Contains(left, strconv.Itoa(tg.PID)+" (") {
				t.Errorf("Leftovers() = %q, want the running target %d", left, tg.PID)
			}
			tg.Kill()
			if left := Leftovers(); len(left) > 0 {
				t.Errorf("Leftovers() = %v after the kill, want none", left)
			}
			if got := call(StartTarget(t, opts), "a"); got != tc.afterRestart {
				t.Errorf("after a restart: %s, want %s", got, tc.afterRestart)
			}
		})
	}
}
