package statedir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/durablestore"
	"idemlab/internal/protocol"
)

// Ensure Read reports a state folder it cannot trust, naming the file.
func TestReadStateRefuses(t *testing.T) {
	tests := []struct {
		store         protocol.Store
		file, content string
	}{
		{protocol.Volatile, "counter", "seven\n"},
		{protocol.Volatile, "effects.log", "1 abc\n"},
		{protocol.Durable, durablestore.FileName, strings.Repeat("garbage ", 1024)},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		path := filepath.Join(dir, tt.file)
		if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(tt.store, Place{Dir: dir}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Read(%s with %s = %q) error = %v, want one naming %s", tt.store, tt.file, tt.content, err, path)
		}
	}
}

// Ensure an unknown store name is refused by Open and Read, listing the names.
func TestUnknownStore(t *testing.T) {
	if _, err := Open("nosuch", Place{Dir: t.TempDir()}, 1, time.Second); err == nil || !strings.Contains(err.Error(), "volatile, durable, postgres") {
		t.Errorf("Open(nosuch) error = %v, want one listing the stores", err)
	}
	if _, err := Read("nosuch", Place{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "volatile, durable, postgres") {
		t.Errorf("Read(nosuch) error = %v, want one listing the stores", err)
	}
}
