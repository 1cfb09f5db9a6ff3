package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"idemlab/internal/audit"
)

// flipSample is how many positions of manifest.json the sweep flips; 0
// means every byte. IDEMLAB_FLIPS overrides it (IDEMLAB_FLIPS=0 sweeps
// every byte of the manifest's ~8,000). At ~66 ms an audit, 1,000 flips
// keep the package's test well under go test's default 10 minutes on a
// 2-core machine running the other packages' tests beside it (CI measured
// 399 s for the package with 2,000).
const flipSample = 1000

// Ensure no single-byte change to manifest.json is accepted unless it
// leaves the manifest's meaning unchanged. The sweep audits the pinned
// evidence (TestMain: the runner's evidence with the pinned server build
// recorded) with -rebuild, so that server_sha256 is checked too. At each of
// a seeded sample of positions it XORs the byte with a seeded non-zero
// value; a flip is rejected when the audit cannot read the manifest or
// fails. The accepted flips must each fall into a class shown to leave
// the meaning unchanged:
//
//   - whitespace: the manifest decodes to the same value (a space turned
//     into a tab, newline or carriage return between tokens);
//   - generated_utc: only generated_utc differs, and it is still a UTC
//     time within the hour after run.json's started_utc (the audit bounds
//     it; the moment the manifest was written is not re-derivable);
//   - postgres_version: only postgres_version differs, and it still starts
//     with a version number: what PostgreSQL reported about itself on the
//     machine that ran the lab, which the audit cannot reach (this one
//     changes the text, so it is counted apart, not as "unchanged").
func TestManifestFlips(t *testing.T) {
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if testing.Short() {
		t.Skip("audits the evidence thousands of times")
	}
	dir := t.TempDir()
	ev := filepath.Join(dir, "evidence")
	if err := os.CopyFS(ev, os.DirFS(filepath.Join(snapshot, "pinned"))); err != nil {
		t.Fatal(err)
	}
	opts := audit.Options{Root: snapshot, Evidence: ev, Rebuild: true}
	if r, err := audit.Audit(opts); err != nil || !r.Pass {
		t.Fatalf("the pinned evidence does not pass before any flip: %v %+v", err, r)
	}
	name := filepath.Join(ev, "manifest.json")
	orig, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	n := flipSample
	if s := os.Getenv("IDEMLAB_FLIPS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(8, 8))
	positions := rng.Perm(len(orig))
	if n > 0 && n < len(positions) {
		positions = positions[:n]
	}
	classes := map[string]int{}
	for _, pos := range positions {
		data := bytes.Clone(orig)
		data[pos] ^= byte(1 + rng.IntN(255))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if !acceptedWithRebuild(opts) {
			classes["rejected"]++
			continue
		}
		class := flipClass(orig, data)
		if class == "" {
			t.Errorf("flip at byte %d (%q -> %q) accepted, and it changes the manifest's meaning", pos, orig[pos], data[pos])
			continue
		}
		classes["accepted: "+class]++
	}
	var keys []string
	for k := range classes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%s: %d of %d flips", k, classes[k], len(positions))
	}
}

// acceptedWithRebuild reports whether the audit with opts (Rebuild set)
// passes. It audits without -rebuild first, which is ten times faster (no
// go build): -rebuild only adds the server_sha256 comparison, so a flip
// that fails without it fails with it too, except for the one failure
// that only a run without -rebuild gives (server_build.prebuilt: true);
// a flip that passes, or fails only that way, is audited again with it.
func acceptedWithRebuild(opts audit.Options) bool {
	quick := opts
	quick.Rebuild = false
	r, err := audit.Audit(quick)
	if err != nil {
		return false
	}
	for _, f := range r.Failures {
		if !strings.Contains(f.Message, "server_build.prebuilt: true") {
			return false
		}
	}
	r, err = audit.Audit(opts)
	return err == nil && r.Pass
}

// flipClass names why a changed manifest means the same, or "".
func flipClass(orig, flipped []byte) string {
	a, errA := decodeAny(orig)
	b, errB := decodeAny(flipped)
	if errA != nil || errB != nil {
		return ""
	}
	if reflect.DeepEqual(a, b) {
		return "whitespace"
	}
	ma, _ := a.(map[string]any)
	mb, _ := b.(map[string]any)
	if ma == nil || mb == nil {
		return ""
	}
	for _, field := range []string{"generated_utc", "postgres_version"} {
		if reflect.DeepEqual(ma[field], mb[field]) {
			continue
		}
		ca, cb := maps.Clone(ma), maps.Clone(mb)
		delete(ca, field)
		delete(cb, field)
		if reflect.DeepEqual(ca, cb) {
			return field
		}
	}
	return ""
}

func decodeAny(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
