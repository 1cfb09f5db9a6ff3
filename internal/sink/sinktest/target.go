package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"idemlab/internal/audit/strict"
	"idemlab/internal/labbuild"
	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// readyLine is the line a target prints once it listens; its group is the
// port.
var readyLine = regexp.MustCompile(`^READY (\d+)$`)

// WriteTarget writes target.json for svc into a fresh folder named after
// it and returns the folder, for runner -target DIR: the lab starts this
// test binary as the target, tells it where its sink is (and, with File
// keys, its STATE), and reads its port from its READY line. It claims a
// durable store with File keys, and no shared store.
func WriteTarget(t testing.TB, svc Service) string {
	t.Helper()
	name := svc.Name
	if name == "" {
		name = "tiny"
	}
	env := svc.env()
	env["EFFECT_URL"] = "{effect_url}"
	if svc.Keys == File {
		env["STATE"] = "{state}"
	}
	doc := map[string]any{
		"name":    name,
		"summary": fmt.Sprintf("the tiny service of package sinktest (this test binary): keys %q, flaw %q", svc.Keys, svc.Flaw),
		"start": map[string]any{"argv": []string{executable(t), mark()}, "env": env,
			"ready": map[string]string{"stdout": readyLine.String()}},
		"request": map[string]string{"path": "/pay", "key_header": "Idempotency-Key"},
		"replay":  map[string]string{"header": "X-Replayed", "value": "yes"},
		"effects": "sink",
		"claims":  map[string]any{"durable": svc.Keys == File, "shared_store": false, "capacity": nil, "max_body": nil},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, target.FileName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// LoadTarget writes target.json for svc (WriteTarget) and loads it as the
// lab does, checked against the module's schema/.
func LoadTarget(t testing.TB, svc Service) *target.Target {
	t.Helper()
	dir := WriteTarget(t, svc)
	root, err := labbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	set, err := strict.LoadSchemas(filepath.Join(root, "schema"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.Load(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// executable is this test binary's absolute path.
func executable(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// Options configure a target a test starts itself.
type Options struct {
	Service
	EffectURL string // where the handler performs its effect; "" for none
	Marker    string // a file the handler writes its value to before answering; "" for none
	State     string // the folder of File keys
}

// StartTarget starts a target and waits for its READY line, through
// serverproc as the lab starts a server. The target is killed when t ends;
// one not ready within 30 s fails t.
func StartTarget(t testing.TB, opts Options) *serverproc.Server {
	t.Helper()
	env := append(os.Environ(), "EFFECT_URL="+opts.EffectURL, "MARKER="+opts.Marker, "STATE="+opts.State, "PORT=")
	for k, v := range opts.Service.env() {
		env = append(env, k+"="+v)
	}
	s, err := serverproc.StartSpec(context.Background(), serverproc.Spec{Path: executable(t), Args: []string{mark()}, Env: env,
		ReadyLine: readyLine, ReadyWithin: readyWithin})
	if err != nil {
		t.Fatalf("target: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}
