// Package servertest builds the effectserver once for a package's tests:
// the integration tests of caserun, retries and chaos start it as a real
// subprocess, and each of their TestMains is one call to Main. It also
// holds what the server's own tests share: the raw requests they leave in
// flight (Stall, InFlight), the checks of what a cut request left
// (NoReply, State), and a Buffer for a log written concurrently.
package servertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"idemlab/internal/pgcluster/pgclustertest"
)

// Main builds ./cmd/effectserver of the module the tests run in into a
// temporary folder, sets *bin to its path, runs the tests through
// pgclustertest.Main (which stops a PostgreSQL the tests shared, if they
// started one), removes the folder and returns the exit code for
// os.Exit. A failed build prints go build's output and returns 1 without
// running a test.
//
//	func TestMain(m *testing.M) { os.Exit(servertest.Main(m, &serverBin)) }
func Main(m *testing.M, bin *string) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "servertest: %v\n", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "servertest-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "servertest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	*bin = filepath.Join(tmp, "effectserver")
	cmd := exec.Command("go", "build", "-o", *bin, "./cmd/effectserver")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "servertest: go build ./cmd/effectserver: %v\n%s", err, out)
		return 1
	}
	return pgclustertest.Main(m)
}

// moduleRoot is the nearest folder at or above the working directory
// (a package's folder, under go test) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod at or above %s", dir)
		}
	}
}
