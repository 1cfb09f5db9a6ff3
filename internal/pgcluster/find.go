package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNotInstalled is wrapped by every error of Start and FindBinDir with
// that cause, so a caller can tell "not installed" (skip the postgres
// column) from "installed but broke" (the lab failed).
var ErrNotInstalled = errors.New("PostgreSQL server programs (initdb, postgres) not found")

// Hint says how to get PostgreSQL on the machines the lab targets.
const Hint = "install Debian's postgresql package"

// debianBinGlob is where Debian and Ubuntu keep each version's programs.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the folder holding initdb and postgres: `pg_config
// --bindir`'s, else Debian's (newest version first), else that of the
// initdb on PATH. The error names where it looked.
func FindBinDir() (string, error) {
	var looked []string
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.Command(pgConfig, "--bindir").Output()
		if dir := strings.TrimSpace(string(out)); err == nil && dir != "" {
			if hasServer(dir) {
				return dir, nil
			}
			looked = append(looked, dir+" (pg_config --bindir)")
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir, nil
		}
	}
	looked = append(looked, debianBinGlob)
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(initdb); hasServer(dir) {
			return dir, nil
		}
	}
	looked = append(looked, "PATH")
	return "", fmt.Errorf("%w (looked in %s)", ErrNotInstalled, strings.Join(looked, ", "))
}

// majorOf returns the version in a Debian bin folder's path, or -1.
func majorOf(bin string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(bin)), 64)
	if err != nil {
		return -1
	}
	return v
}

// hasServer reports whether dir holds executable initdb and postgres.
func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}
