package open

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store/durable"
)

// Ensure Read reports a state folder it cannot trust, naming the file.
func TestReadStateRefuses(t *testing.T) {
	tests := []struct {
		store         protocol.Store
		file, content string
	}{
		{protocol.Volatile, "counter", "seven\n"},
		{protocol.Volatile, "effects.log", "1 abc\n"},
		{protocol.Durable, durable.FileName, strings.Repeat("garbage ", 1024)},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		path := filepath.Join(dir, tt.file)
		if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadState(tt.store, Place{Dir: dir}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadState(%s with %s = %q) error = %v, want one naming %s", tt.store, tt.file, tt.content, err, path)
		}
	}
}

// Ensure an unknown store name is refused by Open and Read, listing the names.
func TestUnknownStore(t *testing.T) {
	if _, err := Store("nosuch", Place{Dir: t.TempDir()}, 1, time.Second); err == nil || !strings.Contains(err.Error(), "volatile, durable, postgres") {
		t.Errorf("Store(nosuch) error = %v, want one listing the stores", err)
	}
	if _, err := ReadState("nosuch", Place{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "volatile, durable, postgres") {
		t.Errorf("ReadState(nosuch) error = %v, want one listing the stores", err)
	}
}
