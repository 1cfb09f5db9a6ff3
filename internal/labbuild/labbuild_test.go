package labbuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// probe is a tiny module whose program prints a word. The word is embedded
// from data/word.txt; a file built only with cgo on and one built only with
// the tag foo replace it, so the output shows both the sources and the
// settings the build saw.
var probe = map[string]string{
	"go.mod": "module probe\n\ngo 1.26\n",
	"cmd/probe/main.go": `package main

import "probe/internal/a"

func main() { println(a.Word) }
`,
	"internal/a/a.go": `package a

import _ "embed"

//go:embed data/word.txt
var Word string
`,
	"internal/a/data/word.txt": "none",
	"internal/a/cgo.go": `//go:build cgo

package a

func init() { Word = "cgo" }
`,
	"internal/a/foo.go": `//go:build foo

package a

func init() { Word = "foo" }
`,
}

// writeTree writes files, named by slash paths, below a new folder.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		write(t, filepath.Join(root, filepath.FromSlash(name)), data)
	}
	return root
}

func write(t testing.TB, file, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// countingGo returns a go command that counts its "go build" calls.
func countingGo(t *testing.T) (goCmd string, builds func() int) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the counting go command is a shell script")
	}
	real, err := exec.LookPath("go")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "builds")
	goCmd = filepath.Join(dir, "go")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = build ]; then echo >>'%s'; fi\nexec '%s' \"$@\"\n", count, real)
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return goCmd, func() int {
		b, _ := os.ReadFile(count)
		return bytes.Count(b, []byte("\n"))
	}
}

// run runs a built probe and returns what it printed.
func run(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return strings.TrimSpace(string(out))
}

func probeOptions(t *testing.T, root string) Options {
	return Options{Root: root, Package: "./cmd/probe", CacheDir: filepath.Join(t.TempDir(), "bin")}
}

// Ensure the manifest's server_build has exactly the agreed shape.
func TestRecipeJSON(t *testing.T) {
	for _, tt := range []struct {
		r    Recipe
		want string
	}{
		{RecipeFor("./cmd/effectserver"), `{"package":"./cmd/effectserver","flags":["-trimpath","-buildvcs=false"],"env":["CGO_ENABLED=0","GOFLAGS=-mod=readonly","GOWORK=off"],"prebuilt":false}`},
		{Prebuilt("./cmd/effectserver"), `{"package":"./cmd/effectserver","flags":[],"env":[],"prebuilt":true}`},
	} {
		b, err := json.Marshal(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); got != tt.want {
			t.Errorf("json.Marshal(%+v) = %s, want %s", tt.r, got, tt.want)
		}
	}
	// The recipe is a copy: changing it does not change the next one.
	r := RecipeFor("./x")
	r.Flags[0] = "-race"
	if got, want := RecipeFor("./x").Flags[0], "-trimpath"; got != want {
		t.Errorf("RecipeFor after editing a returned recipe: Flags[0] = %q, want %q", got, want)
	}
}

// Ensure a second Build with unchanged sources runs no go build, prints
// nothing and returns the same, untouched binary.
func TestBuildHitRunsNoBuild(t *testing.T) {
	t.Parallel()
	goCmd, builds := countingGo(t)
	o := probeOptions(t, writeTree(t, probe))
	o.Go = goCmd
	first, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fi1, err := os.Stat(first.Path)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	o.Log = &log
	second, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := builds(), 1; got != want {
		t.Errorf("go build ran %d times for two Builds, want %d", got, want)
	}
	if !first.Built || second.Built {
		t.Errorf("Built = %v then %v, want true then false", first.Built, second.Built)
	}
	if second.Path != first.Path || second.SHA256 != first.SHA256 {
		t.Errorf("second Build = %s %s, want %s %s", second.Path, second.SHA256, first.Path, first.SHA256)
	}
	fi2, err := os.Stat(second.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fi1, fi2) || !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Errorf("cache hit replaced the binary")
	}
	if log.Len() != 0 {
		t.Errorf("cache hit printed %q, want nothing", log.String())
	}
	if got, want := run(t, second.Path), "none"; got != want {
		t.Errorf("probe printed %q, want %q", got, want)
	}
	if sum, _ := hashFile(second.Path); sum != second.SHA256 {
		t.Errorf("SHA256 = %s, file hashes to %s", second.SHA256, sum)
	}
}

// Ensure a changed source builds a new binary under a new key, and the old
// entry stays for the old sources.
func TestBuildRebuildsChangedSource(t *testing.T) {
	t.Parallel()
	goCmd, builds := countingGo(t)
	root := writeTree(t, probe)
	o := probeOptions(t, root)
	o.Go = goCmd
	old, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "internal/a/data/word.txt"), "changed")
	b, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Built || b.Path == old.Path {
		t.Errorf("after an edit: Built = %v, path %s (was %s); want a new build under a new key", b.Built, b.Path, old.Path)
	}
	if got, want := run(t, b.Path), "changed"; got != want {
		t.Errorf("rebuilt probe printed %q, want %q", got, want)
	}
	if got, want := run(t, old.Path), "none"; got != want {
		t.Errorf("old probe printed %q, want %q", got, want)
	}
	if got, want := builds(), 2; got != want {
		t.Errorf("go build ran %d times, want %d", got, want)
	}
}

// Ensure runners building at once into one empty cache each get a whole,
// working binary.
func TestBuildConcurrent(t *testing.T) {
	t.Parallel()
	o := probeOptions(t, writeTree(t, probe))
	const n = 4
	bins := make([]Binary, n)
	errs := make([]error, n)
	done := make(chan int)
	for i := range n {
		go func() {
			bins[i], errs[i] = Build(context.Background(), o)
			done <- i
		}()
	}
	for range n {
		<-done
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("builder %d: %v", i, errs[i])
		}
		if bins[i].Path != bins[0].Path || bins[i].SHA256 != bins[0].SHA256 {
			t.Errorf("builder %d got %s %s, builder 0 %s %s", i, bins[i].Path, bins[i].SHA256, bins[0].Path, bins[0].SHA256)
		}
	}
	if got, want := run(t, bins[0].Path), "none"; got != want {
		t.Errorf("probe printed %q, want %q", got, want)
	}
	if b, err := Build(context.Background(), o); err != nil || b.Built {
		t.Errorf("Build after the concurrent ones = built %v, %v; want a hit", b.Built, err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(bins[0].Path), ".build-*")); len(m) != 0 {
		t.Errorf("temporary folders left behind: %v", m)
	}
}

// Ensure a damaged cache entry is rebuilt, never trusted.
func TestBuildRebuildsDamagedEntry(t *testing.T) {
	t.Parallel()
	base := probeOptions(t, writeTree(t, probe)) // built once; each case damages a copy of its cache
	if _, err := Build(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, bin string)
	}{
		{"binary overwritten", func(t *testing.T, bin string) {
			write(t, bin, "#!/bin/sh\necho forged\n")
			os.Chmod(bin, 0o755)
		}},
		{"binary truncated", func(t *testing.T, bin string) { os.Truncate(bin, 100) }},
		{"binary removed", func(t *testing.T, bin string) { os.Remove(bin) }},
		{"checksum removed", func(t *testing.T, bin string) { os.Remove(bin + ".sha256") }},
		{"checksum forged", func(t *testing.T, bin string) { write(t, bin+".sha256", strings.Repeat("0", 64)+"\n") }},
		{"not executable", func(t *testing.T, bin string) { os.Chmod(bin, 0o644) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := base
			o.CacheDir = filepath.Join(t.TempDir(), "bin")
			if err := os.CopyFS(o.CacheDir, os.DirFS(base.CacheDir)); err != nil {
				t.Fatal(err)
			}
			first, err := Build(context.Background(), o)
			if err != nil || first.Built {
				t.Fatalf("Build from a copy of a whole cache = built %v, %v; want a hit", first.Built, err)
			}
			tt.damage(t, first.Path)
			b, err := Build(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if !b.Built || b.Path != first.Path || b.SHA256 != first.SHA256 {
				t.Errorf("Build after damage = built %v, %s %s; want a rebuild to %s %s", b.Built, b.Path, b.SHA256, first.Path, first.SHA256)
			}
			if got, want := run(t, b.Path), "none"; got != want {
				t.Errorf("probe printed %q, want %q", got, want)
			}
		})
	}
}

// Ensure the user's Go settings do not reach the build: GOFLAGS from the
// environment or from the go env file (`go env -w`), a go.work, cgo, a
// vendor folder.
func TestBuildIgnoresUserGoSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	goenvFile := filepath.Join(dir, "goenv")
	write(t, goenvFile, "GOFLAGS=-tags=foo\n")
	for _, tt := range []struct {
		name  string
		env   []string
		extra map[string]string // files added to the probe
	}{
		{name: "GOFLAGS in the environment", env: []string{"GOFLAGS=-tags=foo"}},
		{name: "GOFLAGS empty, go env file sets it", env: []string{"GOENV=" + goenvFile, "GOFLAGS="}},
		{name: "GOFLAGS unset, go env file sets it", env: []string{"GOENV=" + goenvFile}},
		{name: "GOWORK names a missing file", env: []string{"GOWORK=" + filepath.Join(dir, "go.work")}},
		{name: "a vendor folder", extra: map[string]string{"vendor/modules.txt": "# bogus v1.0.0\n## explicit\nbogus\n"}},
		{name: "cgo on", env: []string{"CGO_ENABLED=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := writeTree(t, probe)
			for name, data := range tt.extra {
				write(t, filepath.Join(root, filepath.FromSlash(name)), data)
			}
			// The premise: the plain go command does see the setting.
			cmd := exec.Command("go", "run", "./cmd/probe")
			cmd.Dir = root
			cmd.Env = append(withoutGOFLAGS(os.Environ()), tt.env...)
			if out, err := cmd.CombinedOutput(); err == nil && strings.TrimSpace(string(out)) == "none" {
				t.Fatalf("go run with %v printed none: the setting does not reach a plain build, so this case proves nothing", tt.env)
			}
			o := probeOptions(t, root)
			o.Env = append(os.Environ(), tt.env...)
			b, err := Build(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := run(t, b.Path), "none"; got != want {
				t.Errorf("probe built with %v printed %q, want %q", tt.env, got, want)
			}
		})
	}
}

// withoutGOFLAGS drops GOFLAGS from env, so that the go env file's is used.
func withoutGOFLAGS(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			out = append(out, kv)
		}
	}
	return out
}

// Ensure the progress lines: the first build of a program carries the
// note, a later build of it does not, a hit prints nothing.
func TestBuildLines(t *testing.T) {
	t.Parallel()
	root := writeTree(t, probe)
	o := probeOptions(t, root)
	o.FirstNote = "compiles nothing, a moment"
	steps := []struct {
		name string
		edit func()
		want string // a regular expression for the whole output
	}{
		{"first build", func() {}, `^building cmd/probe \(first build: compiles nothing, a moment\) \.\.\.\nbuilt cmd/probe in \d+\.\ds\n$`},
		{"hit", func() {}, `^$`},
		{"rebuild", func() { write(t, filepath.Join(root, "cmd/probe/main.go"), probe["cmd/probe/main.go"]+"// edited\n") }, `^building cmd/probe \.\.\.\nbuilt cmd/probe in \d+\.\ds\n$`},
	}
	for _, s := range steps {
		s.edit()
		var log bytes.Buffer
		o.Log = &log
		if _, err := Build(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(s.want).MatchString(log.String()) {
			t.Errorf("%s printed %q, want %s", s.name, log.String(), s.want)
		}
	}
}

// Ensure a failed build says which package failed and what the go command
// said, and leaves nothing in the cache to be trusted later.
func TestBuildError(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for k, v := range probe {
		files[k] = v
	}
	files["cmd/probe/main.go"] = "package main\n\nfunc main() { undefinedName() }\n"
	o := probeOptions(t, writeTree(t, files))
	_, err := Build(context.Background(), o)
	if err == nil {
		t.Fatal("Build of a broken package succeeded")
	}
	for _, want := range []string{"build ./cmd/probe: exit status 1\n", "undefined: undefinedName"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(o.CacheDir, "*", "probe*")); len(m) != 0 {
		t.Errorf("failed build left %v in the cache", m)
	}
}

// Ensure entries unused for longer than keepUnused go when something is
// built, and recent ones stay.
func TestBuildTrimsOldEntries(t *testing.T) {
	t.Parallel()
	o := probeOptions(t, writeTree(t, probe))
	old := filepath.Join(o.CacheDir, "old")
	recent := filepath.Join(o.CacheDir, "recent")
	write(t, filepath.Join(old, "probe"), "x")
	write(t, filepath.Join(recent, "probe"), "x")
	long := time.Now().Add(-keepUnused - time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("entry unused since %v still there (stat: %v)", long, err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("recent entry: %v", err)
	}
}

// Ensure a long build says it is still building, and says nothing once
// it finished.
func TestProgressWhileBuilding(t *testing.T) {
	var log syncWriter
	var buf strings.Builder
	log.w = &buf
	stop := progress(&log, "cmd/effectserver", time.Now(), time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		log.mu.Lock()
		n := strings.Count(buf.String(), "still building cmd/effectserver (")
		log.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line within 10 s: %q", buf.String())
		}
	}
	stop()
	log.mu.Lock()
	before := buf.String()
	log.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	log.mu.Lock()
	defer log.mu.Unlock()
	if buf.String() != before {
		t.Fatalf("progress printed after stop: %q", strings.TrimPrefix(buf.String(), before))
	}
}

func TestLikeRecipe(t *testing.T) {
	set := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     bool
	}{
		{"the README's command", set("-buildmode", "exe", "-trimpath", "true", "CGO_ENABLED", "0", "GOOS", "linux"), true},
		{"plain go run with a C compiler", set("-buildmode", "exe", "CGO_ENABLED", "1"), false},
		{"trimpath, cgo on", set("-trimpath", "true", "CGO_ENABLED", "1"), false},
		{"cgo off, no trimpath", set("CGO_ENABLED", "0"), false},
		{"no settings", nil, false},
	} {
		if got := likeRecipe(tc.settings); got != tc.want {
			t.Errorf("%s: likeRecipe = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Ensure recipeSettings are the recipe's own (Flags and Env), and the
// README's first command builds the runner with them, so that a cold first
// run compiles the standard library once.
func TestReadmeCommandBuildsLikeRecipe(t *testing.T) {
	if !slices.Contains(Flags, "-trimpath") || !slices.Contains(Env, "CGO_ENABLED=0") || len(recipeSettings) != 2 {
		t.Fatalf("recipeSettings %v are not the recipe's flags %v and env %v", recipeSettings, Flags, Env)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```sh\n")
	if !ok {
		t.Fatal("README.md has no sh block")
	}
	first, _, _ := strings.Cut(block, "\n")
	for _, want := range []string{"CGO_ENABLED=0 ", "go run ", " -trimpath ", " ./cmd/runner "} {
		if !strings.Contains(first, want) {
			t.Errorf("the README's first command %q lacks %q", first, want)
		}
	}
}
