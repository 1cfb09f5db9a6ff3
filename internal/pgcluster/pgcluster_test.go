package pgcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
)

// The test binary doubles as a runner that starts a cluster and is then
// killed, chosen by this variable (its value is the cluster's TempDir).
const childEnv = "PGCLUSTER_TEST_CHILD"

func TestMain(m *testing.M) {
	if parent := os.Getenv(childEnv); parent != "" {
		os.Exit(childMain(parent))
	}
	if dsn := os.Getenv(attachEnv); dsn != "" {
		os.Exit(attachMain(dsn))
	}
	os.Exit(pgclustertest.Main(m))
}

// childMain starts a cluster, prints its folder and waits to be killed.
func childMain(parent string) int {
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{TempDir: parent})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("DIR %s\n", c.Dir)
	time.Sleep(time.Minute)
	c.Stop()
	return 0
}

// requirePostgres skips (or fails, with IDEMLAB_REQUIRE_POSTGRES=1) a test
// that needs PostgreSQL's programs where they are missing.
func requirePostgres(t *testing.T) {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil {
		pgclustertest.SkipOrFail(t, err)
	}
}

// tempDir returns a fresh folder that the postgres OS user can reach when
// the tests run as root, removed when the test ends. Its name is short
// (TMPDIR/pgt-N, not t.TempDir's TMPDIR/TestName123/001) so that the
// cluster's socket path stays within the 107 bytes a unix socket allows
// under a longer TMPDIR, such as CI's.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// processesIn returns the processes (pid: command line) whose command line
// names dir or whose working folder lies in it: every PostgreSQL process
// of a cluster works in its data folder, though only the postmaster's
// command line names it.
func processesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var found []string
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", pid, "cwd"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			found = append(found, pid+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

// awaitNoProcessesIn polls until no process belongs to dir, failing after a
// generous bound.
func awaitNoProcessesIn(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := processesIn(t, dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of %s still running after 30s:\n%s", dir, strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure a cluster starts, hands out databases that clients can use and
// that keep commits durable, and leaves no process and no folder after Stop.
func TestStartCreateConnectStop(t *testing.T) {
	requirePostgres(t)
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{TempDir: tempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if len(processesIn(t, c.Dir)) == 0 {
		t.Fatalf("no process found working in %s while the cluster runs", c.Dir)
	}
	for _, name := range []string{"run_a", "run_b"} {
		dsn, err := c.CreateDatabase(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		conn := pgclustertest.Connect(t, dsn)
		var db, fsync, syncCommit, listen string
		err = conn.QueryRow(ctx, `SELECT current_database(), current_setting('fsync'), current_setting('synchronous_commit'), current_setting('listen_addresses')`).Scan(&db, &fsync, &syncCommit, &listen)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := [4]string{db, fsync, syncCommit, listen}, [4]string{name, "on", "on", ""}; got != want {
			t.Fatalf("database, fsync, synchronous_commit, listen_addresses = %q, want %q", got, want)
		}
	}
	if err := c.DropDatabase(ctx, "run_a"); err != nil {
		t.Fatal(err)
	}
	if c.Version == "" {
		t.Error("Version is empty")
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder %s after Stop: %v, want it gone", c.Dir, err)
	}
	if left := processesIn(t, c.Dir); len(left) > 0 {
		t.Fatalf("processes of %s left after Stop:\n%s", c.Dir, strings.Join(left, "\n"))
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
}

// Ensure a server that cannot start (initdb succeeded) fails pgcluster.Start with the
// server's own words and leaves no process and no folder behind.
func TestStartFailingHalfWayLeavesNothing(t *testing.T) {
	requirePostgres(t)
	parent := tempDir(t)
	_, err := pgcluster.Start(context.Background(), pgcluster.Options{TempDir: parent, Settings: map[string]string{"shared_buffers": "plenty"}})
	if err == nil {
		t.Fatal("pgcluster.Start with shared_buffers=plenty = nil error")
	}
	if !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("pgcluster.Start error = %v, want the server's complaint about shared_buffers", err)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) > 0 {
		t.Fatalf("%s holds %d entries after a failed pgcluster.Start, want none", parent, len(entries))
	}
	if left := processesIn(t, parent); len(left) > 0 {
		t.Fatalf("processes left after a failed pgcluster.Start:\n%s", strings.Join(left, "\n"))
	}
}

// Ensure missing programs are reported as pgcluster.ErrNotInstalled, which callers
// turn into "postgres column skipped".
func TestStartWithoutProgramsIsNotInstalled(t *testing.T) {
	_, err := pgcluster.Start(context.Background(), pgcluster.Options{BinDir: t.TempDir()})
	if !errors.Is(err, pgcluster.ErrNotInstalled) {
		t.Fatalf("pgcluster.Start with an empty BinDir = %v, want ErrNotInstalled", err)
	}
}

// startChild starts the test binary as the child the environment entry
// env (NAME=value) makes it, which prints one line "prefix <value>"; it
// returns the child and the value, and kills the child when the test ends.
func startChild(t *testing.T, env, prefix string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix+" ")
	if err != nil || !ok {
		t.Fatalf("child printed %q (%v), want %s <value>", line, err, prefix)
	}
	return cmd, v
}

// Ensure a runner killed with SIGKILL leaves no postgres running: the
// kernel's parent-death signal stops the server; the next pgcluster.Start removes the
// folder the dead runner could not.
func TestRunnerKilledLeavesNoPostgres(t *testing.T) {
	requirePostgres(t)
	parent := tempDir(t)
	cmd, dir := startChild(t, childEnv+"="+parent, "DIR")
	if len(processesIn(t, dir)) == 0 {
		t.Fatalf("no postgres found working in %s before the kill", dir)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	awaitNoProcessesIn(t, dir)

	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("folder of the killed runner: %v, want it left for the next Start", err)
	}
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{TempDir: parent})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder of the killed runner after the next pgcluster.Start: %v, want it removed", err)
	}
}
