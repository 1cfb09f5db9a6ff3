package pgcluster_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"idemlab/internal/pgcluster"
)

// Ensure a cluster after the first copies initdb's kept output and works
// as one made by initdb: the server's user owns the copy (a damaged entry:
// TestPristineDamaged).
func TestPristineCopy(t *testing.T) {
	requirePostgres(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	start := func(wantCopied bool) {
		t.Helper()
		c, err := pgcluster.Start(context.Background(), pgcluster.Options{TempDir: tempDir(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		if c.InitCopied != wantCopied {
			t.Errorf("InitCopied = %v, want %v", c.InitCopied, wantCopied)
		}
		if os.Geteuid() == 0 {
			u, err := user.Lookup("postgres")
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(c.Dir, "data", "PG_VERSION"))
			if err != nil {
				t.Fatal(err)
			}
			if uid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); uid != u.Uid {
				t.Errorf("the data folder's PG_VERSION is owned by uid %s, want the server's user (%s)", uid, u.Uid)
			}
		}
		if _, err := c.CreateDatabase(context.Background(), "run"); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	start(false)
	entries, _ := filepath.Glob(filepath.Join(cache, "idemlab", "pgdata", "*", "digest"))
	if len(entries) != 1 {
		t.Fatalf("kept entries after the first cluster: %q, want one", entries)
	}
	start(true)
}
