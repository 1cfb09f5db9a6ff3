package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The pinned build, spelled out here instead of taken from the audit or
// the lab: go build FLAGS -o OUT ./cmd/effectserver with ENV added to the
// environment, as the runner builds the server and audit -rebuild rebuilds
// it (which also sets GOTOOLCHAIN=local and GOENV=off). A rebuild that
// reproduces pin's hash shows the audit builds with exactly this recipe.
var (
	pinnedFlags = []string{"-trimpath", "-buildvcs=false"}
	pinnedEnv   = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local", "GOENV=off"}
)

// pinned is one pinned build of a root's stand-in server.
type pinned struct{ sum, goVersion string }

// pins caches pinBuild's answers by what the build reads (the stand-in's
// source, go.mod, the target): every .ct file's root is a copy of one
// fixture, and -trimpath keeps the folder out of the binary.
var pins sync.Map

// pinBuild builds root's ./cmd/effectserver for osArch (GOOS/GOARCH) with
// the pinned recipe and the local Go, and returns the binary's SHA-256 and
// that Go's version.
func pinBuild(root, osArch string) (pinned, error) {
	goos, goarch, ok := strings.Cut(osArch, "/")
	if !ok {
		return pinned{}, fmt.Errorf("os_arch %q: not GOOS/GOARCH", osArch)
	}
	key := sha256.New()
	for _, f := range []string{"cmd/effectserver/main.go", "go.mod"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return pinned{}, err
		}
		fmt.Fprintf(key, "%s %d\n%s", f, len(data), data)
	}
	fmt.Fprintf(key, "%s\n", osArch)
	k := hex.EncodeToString(key.Sum(nil))
	if p, ok := pins.Load(k); ok {
		return p.(pinned), nil
	}
	env := append(append(os.Environ(), pinnedEnv...), "GOOS="+goos, "GOARCH="+goarch)
	tmp, err := os.MkdirTemp("", "audit-pin")
	if err != nil {
		return pinned{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "effectserver")
	build := exec.Command("go", append(append([]string{"build"}, pinnedFlags...), "-o", bin, "./cmd/effectserver")...)
	build.Dir, build.Env = root, env
	if out, err := build.CombinedOutput(); err != nil {
		return pinned{}, fmt.Errorf("pinned build: %v\n%s", err, out)
	}
	ver := exec.Command("go", "env", "GOVERSION")
	ver.Dir, ver.Env = root, env
	out, err := ver.Output()
	if err != nil {
		return pinned{}, fmt.Errorf("go env GOVERSION: %v", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return pinned{}, err
	}
	sum := sha256.Sum256(data)
	p := pinned{hex.EncodeToString(sum[:]), strings.TrimSpace(string(out))}
	pins.Store(k, p)
	return p, nil
}

// pin records in DIR/manifest.json the SHA-256 and the Go version of
// root's stand-in server built for the manifest's os_arch by pinBuild; the
// statement follows the manifest.
func pin(root, dir string) error {
	name := filepath.Join(dir, "manifest.json")
	m, err := readJSON(name)
	if err != nil {
		return err
	}
	osArch, _ := m["os_arch"].(string)
	p, err := pinBuild(root, osArch)
	if err != nil {
		return err
	}
	m["server_sha256"], m["go_version"] = p.sum, p.goVersion
	return writeJSON(name, m)
}

// sha256Hex is the hex SHA-256 of data.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
