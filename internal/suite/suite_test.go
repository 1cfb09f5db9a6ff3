package suite

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/labrun"
	"idemlab/internal/protocol"
)

// Ensure a server that never becomes ready breaks the lab (not the audit)
// and that no server process is left behind: every fake server writes its
// PID, and each must be gone (not even a zombie) when Run returns.
func TestNeverReadyServerLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	fake := filepath.Join(dir, "fake-server")
	script := "#!/bin/sh\necho $$ >> '" + pids + "'\nexec sleep 30\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := labrun.DefaultProtocol
	p.ReadyWithin = 300 * time.Millisecond
	var out bytes.Buffer
	err := Run(context.Background(), Options{
		Root: "../..", Out: filepath.Join(dir, "evidence"), Stores: []protocol.Store{protocol.Volatile},
		Intents: DefaultIntents, ServerPath: fake, Protocol: &p, Stdout: &out, Stderr: &out,
	})
	var usage *UsageError
	if err == nil || errors.Is(err, ErrAuditFailed) || errors.As(err, &usage) {
		t.Fatalf("Run = %v, want a broken-lab error", err)
	}
	if !strings.Contains(err.Error(), "no READY line") {
		t.Fatalf("Run = %v, want it to say the server never printed READY", err)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("no server was started: %v", err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server pid %d outlived the runner (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "evidence")); !os.IsNotExist(err) {
		t.Errorf("a broken lab wrote evidence: %v", err)
	}
}

func TestParseStores(t *testing.T) {
	if got, err := ParseStores("all"); err != nil || !slices.Equal(got, protocol.Stores) {
		t.Fatalf("ParseStores(all) = %v, %v", got, err)
	}
	if got, err := ParseStores("volatile"); err != nil || len(got) != 1 {
		t.Fatalf("ParseStores(volatile) = %v, %v", got, err)
	}
	var usage *UsageError
	if _, err := ParseStores("disk"); !errors.As(err, &usage) {
		t.Fatalf("ParseStores(disk) = %v, want a usage error", err)
	}
}
