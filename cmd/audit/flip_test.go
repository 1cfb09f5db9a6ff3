package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"idemlab/internal/audit"
)

// flipSample is how many positions of manifest.json the sweep flips by
// default: 200 seeded positions of its ~6,400 bytes take about 5 s of CPU
// (a rejected flip is one audit, ~25 ms) and run GOMAXPROCS at a time,
// keeping the package's tests within seconds. IDEMLAB_FLIPS=N flips N
// positions (at most the manifest's size; more means all), IDEMLAB_FLIPS=0
// every byte; CI's plain run sweeps 1,000 (19 s on the 2-core machine).
const flipSample = 200

// Ensure no single-byte change to manifest.json is accepted unless it
// leaves the manifest's meaning unchanged. The sweep audits the fixture's
// evidence pinned to the local Go (forge_test.go: server_sha256 of the
// root's stand-in server) with -rebuild, so that server_sha256 is checked
// too. At each of a seeded sample of positions it XORs the byte with a
// seeded non-zero value; a flip is rejected when the audit cannot read the
// manifest or fails. The accepted flips must each fall into a class shown
// to leave the meaning unchanged, and the log counts each class:
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
	if testing.Short() {
		t.Skip("audits the evidence hundreds of times")
	}
	t.Parallel() // beside the goldens: it uses absolute paths only
	n := flipSample
	if s := os.Getenv("IDEMLAB_FLIPS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 0 {
			t.Fatalf("IDEMLAB_FLIPS=%q: want a count of flips, 0 for every byte", s)
		}
	}
	dir := t.TempDir()
	ev := filepath.Join(dir, "pinned")
	if err := os.CopyFS(ev, os.DirFS(filepath.Join(snapshot, "evidence"))); err != nil {
		t.Fatal(err)
	}
	if err := pin(snapshot, ev); err != nil {
		t.Fatal(err)
	}
	if err := derive(snapshot, ev); err != nil {
		t.Fatal(err)
	}
	opts := audit.Options{Root: snapshot, Evidence: ev, Rebuild: true}
	if r, err := audit.Audit(opts); err != nil || !r.Pass {
		t.Fatalf("the pinned evidence does not pass before any flip: %v %+v", err, r)
	}
	orig, err := os.ReadFile(filepath.Join(ev, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	flips, err := controlFlips(orig)
	if err != nil {
		t.Fatal(err)
	}
	controls := len(flips)
	rng := rand.New(rand.NewPCG(8, 8))
	positions := rng.Perm(len(orig))
	if n > 0 && n < len(positions) {
		positions = positions[:n]
	}
	for _, pos := range positions {
		flips = append(flips, flip{pos: pos, xor: byte(1 + rng.IntN(255))})
	}
	// Each worker flips in its own copy of the folder; verdicts go into
	// their flip's slot, and are counted after Wait.
	classes := make([]string, len(flips))
	workers := min(runtime.GOMAXPROCS(0), len(flips))
	var g errgroup.Group
	for w := range workers {
		folder := filepath.Join(dir, fmt.Sprintf("worker%d", w))
		if err := os.CopyFS(folder, os.DirFS(ev)); err != nil {
			t.Fatal(err)
		}
		g.Go(func() error {
			o := opts
			o.Evidence = folder
			for i := w; i < len(flips); i += workers {
				data := bytes.Clone(orig)
				data[flips[i].pos] ^= flips[i].xor
				if err := os.WriteFile(filepath.Join(folder, "manifest.json"), data, 0o644); err != nil {
					return err
				}
				// The derived files follow the flipped manifest (the
				// statement's digest of its bytes, say), as a forger with
				// the audit's own code would make them, so that they do
				// not reject every flip.
				if err := derive(snapshot, folder); err != nil {
					return err
				}
				switch class := flipClass(orig, data); {
				case !acceptedWithRebuild(o):
					classes[i] = "rejected"
				case class == "":
					classes[i] = "accepted, meaning changed"
				default:
					classes[i] = "accepted: " + class
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, f := range flips[:controls] {
		if want := "accepted: " + f.want; classes[i] != want {
			t.Errorf("control flip at byte %d (%q -> %q): %s, want %s", f.pos, orig[f.pos], orig[f.pos]^f.xor, classes[i], want)
		}
	}
	counts := map[string]int{}
	for i, c := range classes[controls:] {
		counts[c]++
		if f := flips[controls+i]; c == "accepted, meaning changed" {
			t.Errorf("flip at byte %d (%q -> %q) accepted, and it changes the manifest's meaning", f.pos, orig[f.pos], orig[f.pos]^f.xor)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		t.Logf("%s: %d of %d seeded flips", k, counts[k], len(positions))
	}
	t.Logf("and %d control flips, each accepted as its class", controls)
}

// A flip XORs the byte at pos with xor; a control flip names the class it
// must be accepted as.
type flip struct {
	pos  int
	xor  byte
	want string
}

// controlFlips are flips of orig the sweep must accept, one of each class
// a sweep of a few hundred seeded flips may never hit: the space after
// "schema_version": turned into a tab (whitespace), and the last digit of
// generated_utc's seconds changed by one (generated_utc). They show the
// sweep can accept: a sweep whose every flip is rejected proves nothing
// about its classes.
func controlFlips(orig []byte) ([]flip, error) {
	var out []flip
	for _, c := range []struct {
		after string
		off   int
		xor   byte
		want  string
	}{
		{`"schema_version":`, 0, ' ' ^ '\t', "whitespace"},
		{`"generated_utc": "`, len("2006-01-02T15:04:0"), 1, "generated_utc"},
	} {
		i := bytes.Index(orig, []byte(c.after))
		if i < 0 {
			return nil, fmt.Errorf("manifest.json: no %s for a control flip", c.after)
		}
		out = append(out, flip{pos: i + len(c.after) + c.off, xor: c.xor, want: c.want})
	}
	return out, nil
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
