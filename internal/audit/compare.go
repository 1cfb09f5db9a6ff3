package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// DeterministicFile is an evidence file that must be byte-identical
// across runs of the same sources.
type DeterministicFile struct {
	Name     string
	Required bool // a folder without it cannot be compared
	// Explain, if set, names what differs between the two versions, one
	// line each (e.g. which runs); nameA and nameB are the folders.
	Explain func(a, b []byte, nameA, nameB string) []string
}

// DeterministicFiles are the files Compare checks, in order. The jitter
// model's files are optional (a run may not include the experiments);
// retries.json is not here: its counts depend on real timing.
var DeterministicFiles = []DeterministicFile{
	{Name: "results.json", Required: true, Explain: explainRuns},
	{Name: JitterFile, Explain: explainStrategies},
	{Name: "jitter.svg"},
}

// Comparison is the outcome of Compare: Lines are printed as they are.
type Comparison struct {
	Identical bool
	Lines     []string
}

// WriteText prints the comparison's lines.
func (c *Comparison) WriteText(w io.Writer) error {
	for _, l := range c.Lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// Compare says whether the deterministic files of evidence folders a and
// b are byte-identical and, where not, what differs. It returns an error
// when a folder or a required file cannot be read.
func Compare(a, b string) (*Comparison, error) {
	for _, dir := range []string{a, b} {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("evidence folder %s: %w", dir, unwrapPath(err))
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("evidence folder %s: not a directory", dir)
		}
	}
	c := &Comparison{Identical: true}
	for _, f := range DeterministicFiles {
		da, errA := readRegular(filepath.Join(a, f.Name))
		db, errB := readRegular(filepath.Join(b, f.Name))
		for _, e := range []struct {
			dir string
			err error
		}{{a, errA}, {b, errB}} {
			if e.err != nil && (f.Required || !errors.Is(e.err, os.ErrNotExist)) {
				return nil, fmt.Errorf("%s: %w", filepath.Join(e.dir, f.Name), unwrapPath(e.err))
			}
		}
		switch {
		case errA != nil && errB != nil:
			continue // an optional file neither run wrote
		case errA != nil:
			c.Identical = false
			c.Lines = append(c.Lines, fmt.Sprintf("differs: %s (only in %s)", f.Name, b))
		case errB != nil:
			c.Identical = false
			c.Lines = append(c.Lines, fmt.Sprintf("differs: %s (only in %s)", f.Name, a))
		case bytes.Equal(da, db):
			c.Lines = append(c.Lines, "identical: "+f.Name)
		default:
			c.Identical = false
			c.Lines = append(c.Lines, "differs: "+f.Name)
			if f.Explain != nil {
				for _, l := range f.Explain(da, db, a, b) {
					c.Lines = append(c.Lines, f.Name+": "+l)
				}
			}
		}
	}
	return c, nil
}

// explainRuns names the (case, store) runs of two results.json versions
// that differ or exist in only one.
func explainRuns(a, b []byte, nameA, nameB string) []string {
	runsA, errA := runsByKey(a)
	runsB, errB := runsByKey(b)
	switch {
	case errA != nil:
		return []string{fmt.Sprintf("cannot compare runs: %s: %v", nameA, errA)}
	case errB != nil:
		return []string{fmt.Sprintf("cannot compare runs: %s: %v", nameB, errB)}
	}
	var lines []string
	for _, r := range runsA.order {
		rb, ok := runsB.runs[r]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("%s: only in %s", r, nameA))
		case rb != runsA.runs[r]:
			lines = append(lines, fmt.Sprintf("%s: run differs", r))
		}
	}
	for _, r := range runsB.order {
		if _, ok := runsA.runs[r]; !ok {
			lines = append(lines, fmt.Sprintf("%s: only in %s", r, nameB))
		}
	}
	if len(lines) == 0 {
		if runsA.rest != runsB.rest || !equalKeys(runsA.order, runsB.order) {
			lines = append(lines, "the runs are equal; the order of runs or the other fields differ")
		} else {
			lines = append(lines, "the runs are equal; only the bytes' formatting differs")
		}
	}
	return lines
}

type keyedRuns struct {
	order []runKey
	runs  map[runKey]string // canonical rendering of each run (first of duplicates)
	rest  string            // canonical rendering of everything but the runs
}

func runsByKey(data []byte) (*keyedRuns, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	arr, _ := doc["runs"].([]any)
	kr := &keyedRuns{runs: map[runKey]string{}}
	for _, r := range arr {
		run, _ := r.(map[string]any)
		cname, _ := str(run, "case")
		store, _ := str(run, "store")
		k := runKey{cname, store}
		if _, dup := kr.runs[k]; dup {
			continue
		}
		kr.order = append(kr.order, k)
		kr.runs[k] = render(run)
	}
	rest := map[string]any{}
	for k, v := range doc {
		if k != "runs" {
			rest[k] = v
		}
	}
	kr.rest = render(rest)
	return kr, nil
}

func equalKeys(a, b []runKey) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// explainStrategies names the strategies of two jitter.json versions that
// differ, and says whether the parameters do.
func explainStrategies(a, b []byte, nameA, nameB string) []string {
	sa, errA := strategiesByName(a)
	sb, errB := strategiesByName(b)
	switch {
	case errA != nil:
		return []string{fmt.Sprintf("cannot compare strategies: %s: %v", nameA, errA)}
	case errB != nil:
		return []string{fmt.Sprintf("cannot compare strategies: %s: %v", nameB, errB)}
	}
	var lines []string
	if sa.rest != sb.rest {
		lines = append(lines, "parameters or other fields differ")
	}
	for _, n := range sa.order {
		vb, ok := sb.byName[n]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("strategy %s: only in %s", n, nameA))
		case vb != sa.byName[n]:
			lines = append(lines, fmt.Sprintf("strategy %s: differs", n))
		}
	}
	for _, n := range sb.order {
		if _, ok := sa.byName[n]; !ok {
			lines = append(lines, fmt.Sprintf("strategy %s: only in %s", n, nameB))
		}
	}
	if len(lines) == 0 {
		if !slices.Equal(sa.order, sb.order) {
			lines = append(lines, "the strategies are equal; their order differs")
		} else {
			lines = append(lines, "the strategies are equal; only the bytes' formatting differs")
		}
	}
	return lines
}

type namedStrategies struct {
	order  []string
	byName map[string]string // canonical rendering (first of duplicates)
	rest   string            // canonical rendering of everything but the strategies
}

func strategiesByName(data []byte) (*namedStrategies, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	ns := &namedStrategies{byName: map[string]string{}}
	arr, _ := doc["strategies"].([]any)
	for _, s := range arr {
		m, _ := s.(map[string]any)
		n, _ := str(m, "name")
		if _, dup := ns.byName[n]; dup {
			continue
		}
		ns.order = append(ns.order, n)
		ns.byName[n] = render(m)
	}
	rest := map[string]any{}
	for k, v := range doc {
		if k != "strategies" {
			rest[k] = v
		}
	}
	ns.rest = render(rest)
	return ns, nil
}
