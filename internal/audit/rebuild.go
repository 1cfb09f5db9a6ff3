package audit

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

// The pinned build of the effect server: what the runner runs (go build
// FLAGS -o OUT PACKAGE with ENV added to its environment) and records in
// manifest.server_build, and what -rebuild runs. -trimpath and
// -buildvcs=false keep the checkout's path and git state out of the
// binary; CGO_ENABLED=0 keeps the C toolchain out; GOWORK=off keeps a
// workspace out; GOFLAGS=-mod=readonly replaces the user's GOFLAGS (an
// empty GOFLAGS would not: the go command then reads it from the go env
// file). -rebuild also sets GOENV=off, so that nothing from the user's go
// env file (GOAMD64, GOEXPERIMENT, ...) changes its binary, and
// GOTOOLCHAIN=local, so that the local Go is the one named.
var (
	ServerPackage    = "./cmd/effectserver"
	PinnedBuildFlags = []string{"-trimpath", "-buildvcs=false"}
	PinnedBuildEnv   = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off"}
)

// rebuilds caches rebuildServer's answers by root and target for the life
// of the process (the byte-flip sweep audits the same checkout thousands
// of times).
var rebuilds sync.Map

type rebuildResult struct {
	sum, goVersion string
	err            error
}

// rebuildServer builds ServerPackage from root with the pinned flags for
// osArch (GOOS/GOARCH) into a temporary folder and returns the binary's
// SHA-256 and the local Go version.
func rebuildServer(root, osArch string) (sum, goVersion string, err error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", "", err
	}
	key := abs + "\x00" + osArch
	if r, ok := rebuilds.Load(key); ok {
		r := r.(rebuildResult)
		return r.sum, r.goVersion, r.err
	}
	r := rebuildResult{}
	r.sum, r.goVersion, r.err = rebuild(abs, osArch)
	rebuilds.Store(key, r)
	return r.sum, r.goVersion, r.err
}

func rebuild(root, osArch string) (string, string, error) {
	goos, goarch, ok := strings.Cut(osArch, "/")
	if !ok {
		return "", "", fmt.Errorf("os_arch %q: not GOOS/GOARCH", osArch)
	}
	env := append(os.Environ(), PinnedBuildEnv...)
	env = append(env, "GOOS="+goos, "GOARCH="+goarch, "GOTOOLCHAIN=local", "GOENV=off")
	ver := exec.Command("go", "env", "GOVERSION")
	ver.Dir, ver.Env = root, env
	out, err := ver.Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOVERSION: %v", err)
	}
	goVersion := strings.TrimSpace(string(out))
	tmp, err := os.MkdirTemp("", "audit-rebuild")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "effectserver")
	args := append(append([]string{"build"}, PinnedBuildFlags...), "-o", bin, ServerPackage)
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = root, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", goVersion, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	data, err := readRegularFile(bin, 1<<30)
	if err != nil {
		return "", goVersion, err
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:]), goVersion, nil
}
