// Package servertest gives a package's integration tests the effectserver
// (Main), and holds the helpers the server's own tests share: raw
// requests left in flight and checks of what they left.
package servertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"idemlab/internal/labbuild"
	"idemlab/internal/pgcluster/pgclustertest"
)

// Main sets *bin to the effectserver as the lab builds it (labbuild: its
// cache, so a package's tests build it only when its sources changed;
// linking it afresh cost each test binary about 1.7 s of CPU), and runs
// the tests through pgclustertest.Main; a failed build returns 1 without
// running a test.
//
//	func TestMain(m *testing.M) { os.Exit(servertest.Main(m, &serverBin)) }
func Main(m *testing.M, bin *string) int {
	root, err := labbuild.ModuleRoot()
	if err == nil {
		var b labbuild.Binary
		b, err = labbuild.Build(context.Background(), labbuild.Options{Root: root, Package: "./cmd/effectserver"})
		*bin = b.Path
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "servertest: %v\n", err)
		return 1
	}
	return pgclustertest.Main(m)
}
