package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmdtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.ct with the actual output")

// TestCLI runs the golden tests in testdata/*.ct. Each file runs in a fresh
// folder holding a copy of the checkout's cases/ and schema/, so a test can
// break a case file without touching the real one.
func TestCLI(t *testing.T) {
	ts, err := cmdtest.Read("testdata")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ts.Setup = func(root string) error {
		for _, dir := range []string{"cases", "schema"} {
			if err := copyDir(filepath.Join(repo, dir), filepath.Join(root, dir)); err != nil {
				return err
			}
		}
		return nil
	}
	ts.Commands["runner"] = cmdtest.InProcessProgram("runner", func() int {
		return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
	ts.Run(t, *update)
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
