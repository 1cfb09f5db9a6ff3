package volatile

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// open opens dir's counter, failing t on an error; it is closed when t
// ends.
func open(t *testing.T, dir string) *Counter {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// removableDir returns a state folder that a test may remove and make
// again.
func removableDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Ensure a missing file reads as 0 and increments persist as "N\n".
func TestIncrementPersists(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	if got, want := c.val, int64(0); got != want {
		t.Fatalf("value = %d, want %d", got, want)
	}
	for want := int64(1); want <= 3; want++ {
		got, err := c.Increment(fp)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("Increment() = %d, want %d", got, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "3\n"; got != want {
		t.Fatalf("counter file = %q, want %q", got, want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := open(t, dir).val, int64(3); got != want {
		t.Fatalf("reopened value = %d, want %d", got, want)
	}
	if got, err := Read(dir); err != nil || got != 3 {
		t.Fatalf("Read() = %d, %v, want 3, nil", got, err)
	}
}

// Ensure a malformed counter file is an error that names the file.
func TestReadMalformed(t *testing.T) {
	for _, content := range []string{"", "\n", "1", "01\n", "-1\n", "1\n2\n", "abc\n", " 1\n", "99999999999999999999\n"} {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(dir)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Read(%q) error = %v, want one naming %s", content, err, path)
		}
		if _, err := Open(dir); err == nil {
			t.Errorf("Open with counter %q succeeded, want an error", content)
		}
	}
}

// Ensure Open refuses a missing folder and a plain file, and clears crash leftovers.
func TestOpenStateFolder(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "nosuch")); err == nil {
		t.Error("Open(missing folder) succeeded")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file); err == nil {
		t.Error("Open(plain file) succeeded")
	}
	leftover := filepath.Join(dir, tempPrefix+"123")
	if err := os.WriteFile(leftover, []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	open(t, dir)
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover %s still there after Open: %v", leftover, err)
	}
}

// Ensure a reader never sees a torn, empty or unparseable file while a writer increments.
func TestReaderNeverSeesTornFile(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	if _, err := c.Increment(fp); err != nil {
		t.Fatal(err)
	}
	const n = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var reads int
	var last int64
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			v, err := Read(dir)
			if err != nil {
				t.Errorf("read %d: %v", reads, err)
				return
			}
			if v < last {
				t.Errorf("read %d: counter went back from %d to %d", reads, last, v)
				return
			}
			last = v
			reads++
		}
	}()
	for i := 0; i < n; i++ {
		if _, err := c.Increment(fp); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if got, want := c.val, int64(n+1); got != want {
		t.Fatalf("value = %d, want %d", got, want)
	}
}

// Ensure concurrent increments are serialized: none is lost.
func TestConcurrentIncrements(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	const n = 64
	var wg sync.WaitGroup
	seen := make([]bool, n+1)
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Increment(fp)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[v] {
				t.Errorf("value %d returned twice", v)
			}
			seen[v] = true
		}()
	}
	wg.Wait()
	if got, err := Read(dir); err != nil || got != n {
		t.Fatalf("Read() = %d, %v, want %d, nil", got, err, n)
	}
}

// Ensure a failed write leaves the value unchanged and a later write works.
func TestFailedWriteKeepsValue(t *testing.T) {
	dir := removableDir(t)
	c := open(t, dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Increment(fp); err == nil {
		t.Fatal("Increment() in a removed folder succeeded")
	}
	if got, want := c.val, int64(0); got != want {
		t.Fatalf("value after failed write = %d, want %d", got, want)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Increment(fp); err != nil || got != 1 {
		t.Fatalf("Increment() after recovery = %d, %v, want 1, nil", got, err)
	}
}

// Ensure Open and ReadState refuse a counter or journal that is not a
// regular file, naming it, at once: a FIFO used to block Open before the
// server was ready, and a link to /dev/zero to read without end.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	for _, name := range []string{FileName, JournalName} {
		for _, kind := range []string{"a FIFO", "a symlink", "a folder"} {
			t.Run(name+" "+kind, func(t *testing.T) {
				dir := t.TempDir()
				writeState(t, dir, "1\n", "1 "+sum+"\n")
				path := filepath.Join(dir, name)
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				var err error
				switch kind {
				case "a FIFO":
					err = syscall.Mkfifo(path, 0o644)
				case "a symlink":
					err = os.Symlink("/dev/zero", path)
				case "a folder":
					err = os.Mkdir(path, 0o755)
				}
				if err != nil {
					t.Fatal(err)
				}
				for what, open := range map[string]func(string) error{"Open": openErr, "ReadState": readStateErr} {
					done := make(chan error, 1)
					go func() { done <- open(dir) }()
					select {
					case err := <-done:
						if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file ("+kind+")") {
							t.Errorf("%s error = %v, want one naming %s as not a regular file (%s)", what, err, path, kind)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("%s still running after 10s on %s", what, kind) // a hang, not a measurement
					}
				}
			})
		}
	}
}
