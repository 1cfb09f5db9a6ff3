package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/audit/strict"
)

// Ensure a folder holding someone else's file is refused, naming the file,
// and that nothing in it is touched.
func TestCheckTarget(t *testing.T) {
	names := []string{"results.json", ManifestName}
	dir := t.TempDir()
	if err := CheckTarget(filepath.Join(dir, "missing"), names); err != nil {
		t.Fatalf("missing folder: %v", err)
	}
	for _, n := range []string{"results.json", ".results.json.tmp-123"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckTarget(dir, names); err != nil {
		t.Fatalf("folder with own files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckTarget(dir, names)
	if err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("CheckTarget = %v, want notes.txt named", err)
	}
}

// Ensure Write refuses evidence that breaks its schema before writing
// anything, and otherwise writes exactly the listed files plus the manifest.
func TestWrite(t *testing.T) {
	set, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{
		SchemaVersion: 1, GeneratedUTC: "2026-01-02T03:04:05Z", SourceCommit: "unknown", GoVersion: "go1", OSArch: "linux/amd64",
		ServerSHA256: SHA256(nil), Protocol: Protocol{Capacity: 1, MaxBody: 1, WaitMS: 1, ClientTimeoutMS: 1},
		Selection: Selection{Cases: []string{"a"}, Stores: []string{"volatile"}, Targets: []string{}, Experiments: []string{}}, Targets: []ManifestTarget{},
		Flags: map[string]string{}, Sources: map[string]string{"go.mod": SHA256(nil)},
	}
	dir := filepath.Join(t.TempDir(), "ev")
	bad := []File{{Name: "results.json", Data: []byte(`{"schema_version":2,"runs":[]}`), Schema: "results.schema.json"}}
	if err := Write(dir, set, bad, m); err == nil || !strings.Contains(err.Error(), "results.json does not satisfy") {
		t.Fatalf("Write(bad) = %v, want a schema error", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Write(bad) touched the folder: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "REPORT.md"), []byte("an earlier run's rendering"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := []File{
		{Name: "results.json", Data: []byte(`{"schema_version":1,"runs":[]}`), Schema: "results.schema.json"},
		{Name: "run.json", Data: []byte(`{"schema_version":1,"started_utc":"2026-01-02T03:04:05Z","wall_ms":1,"parallel":1,"runs":[]}`), Schema: "run.schema.json"},
	}
	if err := Write(dir, set, good, m); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "manifest.json results.json run.json"; got != want {
		t.Fatalf("folder = %s, want %s", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"results.json": "`+SHA256(good[0].Data)+`"`) {
		t.Fatalf("manifest lacks the results.json hash:\n%s", b)
	}
}

// Ensure a bad -out is refused before anything runs, naming it: an empty
// path, a folder that cannot be made or written, a file, a symlink.
func TestCheckTargetRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ out, want string }{
		{"", "empty path"},
		{"/proc/x", "cannot write in /proc"},
		{filepath.Join(dir, "missing", "deeper"), "no such file or directory"},
		{file, "not a folder"},
		{link, "not a folder"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		tests = append(tests, struct{ out, want string }{filepath.Join(readOnly, "ev"), "cannot write in " + readOnly})
	}
	for _, tt := range tests {
		if err := CheckTarget(tt.out, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckTarget(%q) = %v, want an error containing %q", tt.out, err, tt.want)
		}
	}
}

// Ensure an evidence folder is refused where its files would be hashed as
// sources (or is the checkout itself), through symlinks too, and accepted
// anywhere else, testdata folders included.
func TestCheckOutsideSources(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cases", "schema", "internal/audit/testdata", "cmd/runner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "cases"), filepath.Join(outside, "to-cases")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		out, want string // want: "" accepted, else a part of the error
	}{
		{"evidence", ""},
		{"ev/nested", ""},
		{"internal/audit/testdata/ev", ""},
		{filepath.Join(outside, "ev"), ""},
		{"..", ""},
		{".", "is the checkout itself"},
		{"cases", "is inside cases, whose files are the lab's sources"},
		{"cases/evid", "is inside cases"},
		{"schema/x/y", "is inside schema"},
		{"internal/evid", "is inside internal"},
		{"cmd/runner/ev", "is inside cmd"},
		{"evidence/../cases/ev", "is inside cases"},
		{filepath.Join(outside, "to-cases", "ev"), "is inside cases"},
		{filepath.Join(outside, "to-cases"), "is inside cases"},
	}
	for _, tt := range tests {
		out := tt.out
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		err := CheckOutsideSources(root, out)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckOutsideSources(%s) = %v, want nil", tt.out, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckOutsideSources(%s) = %v, want an error saying %q", tt.out, err, tt.want)
		}
	}
}

// Ensure a folder the runner wrote, timelines the audit drew in it
// included, is one it may write again: every chaos trial's timeline on a
// target is derived, and nothing else that looks like one.
func TestDerivedPattern(t *testing.T) {
	for name, want := range map[string]bool{
		"chaos-durable.svg":                     true,
		"chaos-target-node-redis.svg":           true,
		"chaos-target-node-redis.trial2.svg":    true,
		"chaos-target-node-redis.trial10.svg":   true,
		"chaos-target-node-redis.trial1.svg":    false, // the first trial has the plain name
		"chaos-target-node-redis.trial11.svg":   false, // past -chaos-trials' bound
		"chaos-target-node-redis.trial2.jsonl":  false, // a history: the runner's, not derived
		"chaos-target-node-redis.trial2.svg.md": false,
	} {
		if got := DerivedPattern.MatchString(name); got != want {
			t.Errorf("DerivedPattern.MatchString(%q) = %v, want %v", name, got, want)
		}
	}
}
