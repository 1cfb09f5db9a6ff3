// Package servertest builds the effectserver once for a package's
// integration tests (Main), and holds the helpers the server's own tests
// share: raw requests left in flight and checks of what they left.
package servertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"idemlab/internal/pgcluster/pgclustertest"
)

// Main builds the effectserver into a temporary folder, sets *bin to its
// path, and runs the tests through pgclustertest.Main; a failed build
// returns 1 without running a test.
//
//	func TestMain(m *testing.M) { os.Exit(servertest.Main(m, &serverBin)) }
func Main(m *testing.M, bin *string) int {
	tmp, err := os.MkdirTemp("", "servertest-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "servertest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	*bin = filepath.Join(tmp, "effectserver")
	// By import path: go test runs in the package's folder, inside the module.
	cmd := exec.Command("go", "build", "-o", *bin, "idemlab/cmd/effectserver")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "servertest: go build idemlab/cmd/effectserver: %v\n%s", err, out)
		return 1
	}
	return pgclustertest.Main(m)
}
