// Package evidence writes the lab's evidence folder: every file validated
// against its schema before it is written, each written atomically, and a
// manifest last that records where the evidence came from and the SHA-256 of
// every source that can change a result and of every other evidence file.
package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"idemlab/internal/audit/strict"
	"idemlab/internal/labbuild"
	"idemlab/internal/target"
)

// ManifestName is the manifest's file name; it lists every other file.
const ManifestName = "manifest.json"

// File is one evidence file other than the manifest.
type File struct {
	Name   string // relative slash path inside the folder
	Data   []byte
	Schema string // schema file name to validate against; empty for text
}

// Manifest is manifest.json. Files is filled in by Write.
type Manifest struct {
	SchemaVersion int               `json:"schema_version"`
	GeneratedUTC  string            `json:"generated_utc"`
	SourceCommit  string            `json:"source_commit"`
	SourceDirty   bool              `json:"source_dirty"`
	GoVersion     string            `json:"go_version"`
	OSArch        string            `json:"os_arch"`
	ServerSHA256  string            `json:"server_sha256"`
	ServerBuild   *labbuild.Recipe  `json:"server_build,omitempty"` // how to rebuild the server, or prebuilt
	Protocol      Protocol          `json:"protocol"`
	Selection     Selection         `json:"selection"`
	Flags         map[string]string `json:"flags"` // the knobs set away from their defaults (runner.Options.RecordedFlags)
	// PostgresVersion is the PostgreSQL the postgres store ran on, if it
	// did: here, as results.json holds nothing of the machine.
	PostgresVersion string `json:"postgres_version,omitempty"`
	UnsafeRegistry  string `json:"unsafe_registry,omitempty"` // a mutation run's broken registry
	// Shard is the slice of the run this folder holds (runner -shard K/N);
	// absent: the whole run.
	Shard   *Shard            `json:"shard,omitempty"`
	Targets []ManifestTarget  `json:"targets"`
	Sources map[string]string `json:"sources"`
	Files   map[string]string `json:"files"`
}

// Protocol is the constants the lab ran with, as the manifest records them.
type Protocol struct {
	KeyHeader       string `json:"key_header"`
	ReplayedHeader  string `json:"replayed_header"`
	FaultHeader     string `json:"fault_header"`
	KeyPattern      string `json:"key_pattern"`
	DefaultBody     string `json:"default_body"`
	Capacity        int    `json:"capacity"`
	MaxBody         int    `json:"max_body"`
	WaitMS          int64  `json:"wait_ms"`
	SlowMS          int64  `json:"slow_ms"`
	CrashExitCode   int    `json:"crash_exit_code"`
	ClientTimeoutMS int64  `json:"client_timeout_ms"`
}

// Shard is a slice of a run, as the manifest records it.
type Shard struct {
	K int `json:"k"`
	N int `json:"n"`
}

// Selection is what the run covered: cases × stores and targets, experiments.
type Selection struct {
	Cases       []string `json:"cases"`
	Stores      []string `json:"stores"`
	Targets     []string `json:"targets"`
	Experiments []string `json:"experiments"`
}

// ManifestTarget is one target as the manifest records it: its folder
// (relative to the checkout; empty outside it) and digest, the versions of
// the code under test and the runtime, and why it was skipped, if it was.
type ManifestTarget struct {
	Name      string           `json:"name"`
	Dir       string           `json:"dir"`
	Digest    string           `json:"digest"`
	Libraries []target.Library `json:"libraries"`
	Runtime   string           `json:"runtime"`
	Skipped   string           `json:"skipped"`
}

// Marshal encodes v the one way evidence is written: two-space indent, no
// HTML escaping, a final newline. Struct field order fixes the key order.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SHA256 is the hex SHA-256 of b.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CheckTarget makes sure dir can take new evidence without losing anything,
// before any run starts: a missing folder in a writable one, or a writable
// folder (not a symlink) of regular files the runner writes (names, or a
// name one of patterns matches). Anything else is refused, naming it.
func CheckTarget(dir string, names []string, patterns ...*regexp.Regexp) error {
	if dir == "" {
		return errors.New("evidence folder: empty path (give -out a folder)")
	}
	fi, err := os.Lstat(dir)
	switch {
	case os.IsNotExist(err):
		return probeWritable(filepath.Dir(dir), dir)
	case err != nil:
		return fmt.Errorf("evidence folder: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("evidence folder %s: not a folder (a symlink or a file): choose another -out", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("evidence folder: %w", err)
	}
	for _, e := range entries {
		ours := slices.Contains(names, e.Name()) || slices.ContainsFunc(patterns, func(p *regexp.Regexp) bool { return p.MatchString(e.Name()) })
		if !e.Type().IsRegular() || !(ours || isTemp(e.Name())) {
			return fmt.Errorf("evidence folder %s holds %s, which the runner does not write: refusing to mix it into new evidence (choose another -out)", dir, e.Name())
		}
	}
	return probeWritable(dir, dir)
}

// probeWritable makes and removes a file in folder, which holds (or is) out.
func probeWritable(folder, out string) error {
	fi, err := os.Stat(folder)
	if err != nil {
		return fmt.Errorf("evidence folder %s: %w", out, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("evidence folder %s: %s is not a folder", out, folder)
	}
	f, err := os.CreateTemp(folder, ".idemlab-probe-*")
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err // the probe's random name says nothing
		}
		return fmt.Errorf("evidence folder %s: cannot write in %s: %w", out, folder, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// Write validates every file and the manifest, then writes them into dir,
// the manifest last, and removes what an earlier run wrote and this one
// does not (the audit writes its renderings again): the folder lists
// exactly what the manifest lists.
func Write(dir string, schemas *strict.Schemas, files []File, m Manifest) error {
	m.Files = map[string]string{}
	for _, f := range files {
		if f.Schema != "" {
			if _, err := schemas.Check(f.Schema, f.Data, anySize(f.Data)); err != nil {
				return fmt.Errorf("evidence %s does not satisfy %s: %w", f.Name, f.Schema, err)
			}
		}
		m.Files[f.Name] = SHA256(f.Data)
	}
	mb, err := Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if _, err := schemas.Check("manifest.schema.json", mb, anySize(mb)); err != nil {
		return fmt.Errorf("evidence %s does not satisfy manifest.schema.json: %w", ManifestName, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make evidence folder: %w", err)
	}
	// The old manifest goes first: a folder caught half-written then fails
	// the audit instead of passing with stale hashes.
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove old manifest: %w", err)
	}
	if err := removeUnlisted(dir, m.Files); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeAtomic(filepath.Join(dir, filepath.FromSlash(f.Name)), f.Data); err != nil {
			return err
		}
	}
	return writeAtomic(filepath.Join(dir, ManifestName), mb)
}

// anySize are caps no document of data's size reaches: the lab's own
// output is checked against its schema, not bounded.
func anySize(data []byte) strict.Caps {
	return strict.Caps{Values: len(data) + 1, Objects: len(data) + 1}
}

// DerivedNames are the files the audit writes into an evidence folder
// after the runner (audit -write): a folder that holds them is one the
// runner may write again. DerivedPattern matches the chaos timelines: a
// store's, and each chaos trial's on a target (chaos-target-NAME.svg for
// the first, chaos-target-NAME.trialN.svg for a later one).
var (
	DerivedNames   = []string{"REPORT.md", "TARGETS.md", "MATRIX.md", "matrix.svg", "verdicts.json", "jitter.svg", "statement.intoto.json", "statement.intoto.dsse.json"}
	DerivedPattern = regexp.MustCompile(`^chaos-(target-[a-z][a-z0-9-]{0,47}(\.trial([2-9]|10))?|[a-z]+)\.svg$`)
)

func removeUnlisted(dir string, listed map[string]string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read evidence folder: %w", err)
	}
	for _, e := range entries {
		if _, ok := listed[e.Name()]; !ok && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove stale evidence: %w", err)
			}
		}
	}
	return nil
}

// isTemp reports whether name is a temp file of a killed writeAtomic.
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// writeAtomic writes a temp file beside path, fsyncs it and renames it over
// path, so a reader sees the old bytes or the new, never a mix.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
