// Package labbuild builds the lab's own programs from the checkout with one
// pinned recipe (Flags, Env: the binary depends only on the sources and the
// toolchain, so the audit can rebuild the server), cached under a key of
// everything that can change them.
//
// A binary lives at CacheDir/KEY/NAME beside NAME.sha256. KEY hashes the
// go command's code-generation settings, the recipe, go.mod, go.sum and
// every module file go build could compile in (found by parsing imports,
// so editing the runner does not rebuild the server); KEY/inputs.txt lists
// them, to diff "why did it rebuild?". A build renames the binary into
// place, so a concurrent runner sees none or a whole one.
package labbuild

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// Flags are the pinned flags of every lab build.
var Flags = []string{"-trimpath", "-buildvcs=false"}

// Env is the pinned environment of every lab build, appended last to the
// caller's, where exec.Cmd takes them (an empty GOFLAGS would be read from
// the go env file).
var Env = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off"}

// LikeRecipe reports whether the running program was built with -trimpath
// and CGO_ENABLED=0: then a lab build reuses its compiled standard library
// (otherwise about 15 s more on 2 cores).
func LikeRecipe() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && likeRecipe(bi.Settings)
}

// recipeSettings are those settings, as debug.BuildInfo records them.
var recipeSettings = map[string]string{"-trimpath": "true", "CGO_ENABLED": "0"}

func likeRecipe(settings []debug.BuildSetting) bool {
	matched := 0
	for _, s := range settings {
		if want, ok := recipeSettings[s.Key]; ok && s.Value == want {
			matched++
		}
	}
	return matched == len(recipeSettings)
}

// Recipe says how a lab binary was made, for the audit to repeat it.
type Recipe struct {
	Package  string   `json:"package"`  // as given to go build, e.g. "./cmd/effectserver"
	Flags    []string `json:"flags"`    // Flags, or empty when prebuilt
	Env      []string `json:"env"`      // Env, or empty when prebuilt
	Prebuilt bool     `json:"prebuilt"` // the binary was supplied, not built here
}

// RecipeFor returns the recipe Build uses for pkg.
func RecipeFor(pkg string) Recipe {
	return Recipe{Package: pkg, Flags: slices.Clone(Flags), Env: slices.Clone(Env)}
}

// Prebuilt is the recipe of a binary supplied in place of pkg: unknown.
func Prebuilt(pkg string) Recipe {
	return Recipe{Package: pkg, Flags: []string{}, Env: []string{}, Prebuilt: true}
}

// ModuleRoot is the folder of the go.mod at or above the working folder:
// the checkout, for a test (go test runs in the package's folder, inside
// the module) that builds or loads the lab's files.
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod at or above %s", wd)
		}
	}
}

// Options say what to build and where.
type Options struct {
	Root      string    // the module's folder
	Package   string    // relative to Root ("./cmd/effectserver"), or an import path inside the module
	CacheDir  string    // holds the binaries; "": os.UserCacheDir()/idemlab/bin
	Go        string    // the go command; "": "go" in PATH
	Env       []string  // the environment the pinned Env is appended to; nil: os.Environ()
	Log       io.Writer // progress lines; nil discards them
	FirstNote string    // added to the progress line when this cache never built the program
}

// Binary is a built (or cached) program.
type Binary struct {
	Path   string // the executable, inside the cache
	SHA256 string // hex SHA-256 of the file at Path, checked by Build
	Recipe Recipe // how it was built
	Built  bool   // this call ran go build (false: a cache hit)
}

// keepUnused is how long an entry may go unused before a build removes it.
const keepUnused = 5 * 24 * time.Hour

// Build returns o.Package built with the pinned recipe, from the cache when
// an entry of its key is intact (checked against its SHA-256).
func Build(ctx context.Context, o Options) (b Binary, err error) {
	defer func() {
		if err != nil {
			b, err = Binary{}, fmt.Errorf("build %s: %w", o.Package, err)
		}
	}()
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.CacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return Binary{}, err
		}
		o.CacheDir = filepath.Join(dir, "idemlab", "bin")
	}
	env := append(slices.Clone(o.Env), Env...)

	goenv, err := goEnv(ctx, o.Go, o.Root, env)
	if err != nil {
		return Binary{}, err
	}
	inputs, err := keyInputs(o.Root, o.Package, goenv)
	if err != nil {
		return Binary{}, err
	}
	name, err := progName(o.Root, o.Package)
	if err != nil {
		return Binary{}, err
	}
	name += goenv["GOEXE"]
	dir := filepath.Join(o.CacheDir, hashBytes([]byte(inputs))[:32])
	bin := filepath.Join(dir, name)
	b = Binary{Path: bin, Recipe: RecipeFor(o.Package)}

	if sum, ok := intact(bin); ok {
		now := time.Now()
		os.Chtimes(dir, now, now) // mark the entry used; a read-only cache still works
		b.SHA256 = sum
		return b, nil
	}

	shown := strings.TrimPrefix(o.Package, "./")
	note := ""
	if o.FirstNote != "" && !everBuilt(o.CacheDir, name) {
		note = " (first build: " + o.FirstNote + ")"
	}
	fmt.Fprintf(o.Log, "building %s%s ...\n", shown, note)
	began := time.Now()
	o.Log = &syncWriter{w: o.Log} // the progress lines and the go command's own, from two goroutines
	stop := progress(o.Log, shown, began, ProgressEvery)
	b.SHA256, err = goBuild(ctx, o, env, dir, name, inputs)
	stop()
	if err != nil {
		return Binary{}, err
	}
	fmt.Fprintf(o.Log, "built %s in %.1fs\n", shown, time.Since(began).Seconds())
	b.Built = true
	trim(o.CacheDir, dir, time.Now().Add(-keepUnused))
	return b, nil
}

// ProgressEvery is how often a long build says it is still building: the
// first run is never silent for 10 s, with room for a late tick.
const ProgressEvery = 8 * time.Second

// progress prints "still building NAME (N s)" every interval until the
// returned stop is called; stop returns once it no longer prints.
func progress(log io.Writer, name string, began time.Time, every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				fmt.Fprintf(log, "still building %s (%.0f s)\n", name, now.Sub(began).Seconds())
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// goBuild builds into a temporary folder inside dir, renames the results
// into place and returns the binary's SHA-256.
func goBuild(ctx context.Context, o Options, env []string, dir, name, inputs string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	out := filepath.Join(tmp, name)
	args := append(append([]string{"build"}, Flags...), "-o", out, o.Package)
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir, cmd.Env = o.Root, env
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w\n%s", err, strings.TrimRight(string(msg), "\n"))
	}
	o.Log.Write(msg) // "go: downloading …" and the like; usually nothing

	sum, err := hashFile(out)
	if err != nil {
		return "", err
	}
	for n, data := range map[string]string{name + ".sha256": sum + "\n", "inputs.txt": inputs} {
		if err := os.WriteFile(filepath.Join(tmp, n), []byte(data), 0o644); err != nil {
			return "", err
		}
	}
	// The binary first: a reader that sees the new binary with the old
	// .sha256 file finds a mismatch and builds again, never trusts it.
	for _, n := range []string{name, name + ".sha256", "inputs.txt"} {
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			return "", err
		}
	}
	return sum, nil
}

// intact reports whether bin exists, is executable and matches the SHA-256
// stored beside it, and returns that SHA-256.
func intact(bin string) (string, bool) {
	want, err := os.ReadFile(bin + ".sha256")
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(bin)
	if err != nil || !fi.Mode().IsRegular() || (runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0) {
		return "", false
	}
	got, err := hashFile(bin)
	if err != nil || got != strings.TrimSpace(string(want)) {
		return "", false
	}
	return got, true
}

// everBuilt reports whether any entry of the cache holds a program name.
func everBuilt(cacheDir, name string) bool {
	m, _ := filepath.Glob(filepath.Join(cacheDir, "*", name))
	return len(m) > 0
}

// trim removes the cache's entries last used before cutoff, except keep;
// a binary another process runs survives its removal.
func trim(cacheDir, keep string, cutoff time.Time) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(cacheDir, e.Name())
		fi, err := e.Info()
		if err != nil || !e.IsDir() || p == keep || !fi.ModTime().Before(cutoff) {
			continue
		}
		os.RemoveAll(p)
	}
}

// progName is the name go build gives the program in pkg.
func progName(root, pkg string) (string, error) {
	dir, err := pkgDir(root, pkg)
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	name := filepath.Base(abs)
	if name == "" || name == "." || name == string(filepath.Separator) {
		return "", fmt.Errorf("no program name in %q", pkg)
	}
	return name, nil
}

// pkgDir is the folder of pkg, a path relative to root ("./cmd/x") or an
// import path inside root's module.
func pkgDir(root, pkg string) (string, error) {
	if pkg == "." || strings.HasPrefix(pkg, "./") || strings.HasPrefix(pkg, "../") {
		return filepath.Join(root, filepath.FromSlash(pkg)), nil
	}
	mod, err := readGoMod(root)
	if err != nil {
		return "", err
	}
	if rel, ok := inModule(pkg, mod.path); ok {
		return filepath.Join(root, filepath.FromSlash(rel)), nil
	}
	return "", fmt.Errorf("%s is not a package of module %s", pkg, mod.path)
}

// inModule returns importPath's path inside module modPath, if it is in it.
func inModule(importPath, modPath string) (string, bool) {
	if importPath == modPath {
		return ".", true
	}
	if rel, ok := strings.CutPrefix(importPath, modPath+"/"); ok {
		return path.Clean(rel), true
	}
	return "", false
}
