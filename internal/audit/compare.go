package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DeterministicFile is an evidence file byte-identical across runs.
type DeterministicFile struct {
	Name     string
	Required bool // a folder without it cannot be compared
	// field, if set, is the array whose items (named by key, read within
	// caps) explain names when two versions differ, e.g. which runs.
	field, differs string
	caps           jsonCap
	key            func(map[string]any) string
}

// DeterministicFiles are the files Compare checks, in order, read as the
// audit reads evidence; all but results.json are optional. retries.json is
// not here: its counts depend on real timing.
var DeterministicFiles = []DeterministicFile{
	{Name: "results.json", Required: true, field: "runs", differs: "run differs", caps: capResultsJSON,
		key: func(run map[string]any) string { return runKeyOf(run).String() }},
	{Name: JitterFile, field: "strategies", differs: "differs", caps: capJitterJSON,
		key: func(s map[string]any) string {
			n, _ := str(s, "name")
			return "strategy " + n
		}},
	{Name: JitterSVGFile},
	{Name: "REPORT.md"},
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
// b are byte-identical and, where not, what differs.
func Compare(a, b string) (*Comparison, error) {
	for _, dir := range []string{a, b} {
		if err := checkDir("evidence folder", dir); err != nil {
			return nil, err
		}
	}
	c := &Comparison{Identical: true}
	for _, f := range DeterministicFiles {
		var data [2][]byte
		var in []string // the folders that hold it
		for i, dir := range []string{a, b} {
			d, err := readInside(dir, f.Name, capOf(f.Name))
			if err != nil && (f.Required || !errors.Is(err, os.ErrNotExist)) {
				return nil, fmt.Errorf("%s: %w", filepath.Join(dir, f.Name), unwrapPath(err))
			}
			if err == nil {
				data[i], in = d, append(in, dir)
			}
		}
		da, db := data[0], data[1]
		switch {
		case len(in) == 0:
			continue // an optional file neither run wrote
		case len(in) == 1:
			c.Identical = false
			c.Lines = append(c.Lines, fmt.Sprintf("differs: %s (only in %s)", f.Name, in[0]))
		case bytes.Equal(da, db):
			c.Lines = append(c.Lines, "identical: "+f.Name)
		default:
			c.Identical = false
			c.Lines = append(c.Lines, "differs: "+f.Name)
			if f.field != "" {
				for _, l := range f.explain(da, db, a, b) {
					c.Lines = append(c.Lines, f.Name+": "+l)
				}
			}
		}
	}
	c.Lines = append(c.Lines, compareTargetRates(a, b)...)
	// The other files hold timings, histories and a target's own races:
	// they are named, never compared byte for byte.
	var differ, alone []string
	for _, name := range otherFiles(a, b) {
		da, errA := readInside(a, name, capOf(name))
		db, errB := readInside(b, name, capOf(name))
		switch {
		case errA != nil || errB != nil:
			alone = append(alone, name)
		case !bytes.Equal(da, db):
			differ = append(differ, name)
		}
	}
	if len(differ) > 0 {
		c.Lines = append(c.Lines, "differs as expected (timings, histories, the targets' own timing; not compared byte for byte): "+strings.Join(differ, ", "))
	}
	if len(alone) > 0 {
		c.Lines = append(c.Lines, "in only one folder (not compared): "+strings.Join(alone, ", "))
	}
	return c, nil
}

// otherFiles lists the other regular files of either folder, sorted.
func otherFiles(a, b string) []string {
	seen := map[string]bool{}
	for _, dir := range []string{a, b} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Type().IsRegular() && !slices.ContainsFunc(DeterministicFiles, func(f DeterministicFile) bool { return f.Name == e.Name() }) {
				seen[e.Name()] = true
			}
		}
	}
	return sortedKeys(seen)
}

// explain names the items of f.field of two versions a and b (of folders
// nameA and nameB) that differ or exist in only one; when every item
// matches, it says what else differs.
func (f DeterministicFile) explain(a, b []byte, nameA, nameB string) []string {
	field := f.field
	ia, errA := itemsByKey(a, f.caps, field, f.key)
	ib, errB := itemsByKey(b, f.caps, field, f.key)
	switch {
	case errA != nil:
		return []string{fmt.Sprintf("cannot compare %s: %s: %v", field, nameA, errA)}
	case errB != nil:
		return []string{fmt.Sprintf("cannot compare %s: %s: %v", field, nameB, errB)}
	}
	var lines []string
	for _, k := range ia.order {
		vb, ok := ib.items[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("%s: only in %s", k, nameA))
		case vb != ia.items[k]:
			lines = append(lines, k+": "+f.differs)
		}
	}
	for _, k := range ib.order {
		if _, ok := ia.items[k]; !ok {
			lines = append(lines, fmt.Sprintf("%s: only in %s", k, nameB))
		}
	}
	if len(lines) == 0 {
		if ia.rest != ib.rest || !slices.Equal(ia.order, ib.order) {
			lines = append(lines, fmt.Sprintf("the %s are equal; their order or the other fields differ", field))
		} else {
			lines = append(lines, fmt.Sprintf("the %s are equal; only the bytes' formatting differs", field))
		}
	}
	return lines
}

// keyedItems is one document's array field, item by item.
type keyedItems struct {
	order []string
	items map[string]string // canonical rendering of each item (first of duplicates)
	rest  string            // canonical rendering of everything but the array
}

func itemsByKey(data []byte, caps jsonCap, field string, key func(map[string]any) string) (*keyedItems, error) {
	v, err := decodeJSON(data, caps)
	if err != nil {
		return nil, errors.New(jsonRefusal(err))
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	arr, _ := doc[field].([]any)
	ki := &keyedItems{items: map[string]string{}}
	for _, it := range arr {
		m, _ := it.(map[string]any)
		k := key(m)
		if _, dup := ki.items[k]; dup {
			continue
		}
		ki.order = append(ki.order, k)
		ki.items[k] = render(m)
	}
	rest := maps.Clone(doc)
	delete(rest, field)
	ki.rest = render(rest)
	return ki, nil
}

// compareTargetRates sets the rates of each case run on a target in both
// folders side by side, as audit -reproduce does (pairRates): each safety
// verdict's and each rule's, over the trials each folder ran (a run of
// the main command runs fewer than the committed evidence). It names the
// cases whose rates' Wilson intervals at caseLevel do not overlap; they
// never make the folders differ, for a target's races are its own and two
// honest samples of one rate fall apart rarely (reproducetargets.go).
func compareTargetRates(a, b string) []string {
	for _, dir := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(dir, VerdictsFile)); err != nil {
			return nil // a folder from before verdicts.json, or none
		}
	}
	ca, order, _, err := targetCells(a)
	if err == nil && len(order) == 0 {
		return nil // no case ran on a target
	}
	var cb map[string]map[string]any
	if err == nil {
		cb, _, _, err = targetCells(b)
	}
	if err != nil {
		return []string{"target rates: not compared: " + err.Error()}
	}
	var lines []string
	var both, apart, onlyOne int
	trials := [2]map[int]bool{{}, {}}
	for _, key := range order {
		if cb[key] == nil {
			onlyOne++
			continue
		}
		both++
		ra, rb := ratesOf(ca[key]), ratesOf(cb[key])
		trials[0][ra.trials], trials[1][rb.trials] = true, true
		target, cs, _ := strings.Cut(key, "/")
		was := apart
		for _, p := range pairRates(ra, rb, caseLevel) {
			if p.apart {
				lines = append(lines, fmt.Sprintf("target rates: target %s, case %s: %s in %s trials of %s (%s), in %s of %s (%s)",
					target, cs, p.what, p.a, a, p.intervalA, p.b, b, p.intervalB))
				if was == apart {
					apart++
				}
			}
		}
	}
	for key := range cb {
		if ca[key] == nil {
			onlyOne++
		}
	}
	if both == 0 && onlyOne == 0 {
		return nil
	}
	head := fmt.Sprintf("target rates: %d cases on targets ran in both (each in %s in %s, %s in %s): %d agree (every safety verdict's and rule's Wilson %s intervals overlap)",
		both, trialCounts(trials[0]), a, trialCounts(trials[1]), b, both-apart, caseLevel.name)
	if apart > 0 {
		head += fmt.Sprintf(", %d do not (a target's races are its own: not a difference of the folders)", apart)
	}
	if onlyOne > 0 {
		head += fmt.Sprintf("; %d ran in only one folder", onlyOne)
	}
	return append([]string{head}, lines...)
}

// trialCounts says how many trials the cases ran: "3 trials", "1 trial"
// or "1 to 10 trials".
func trialCounts(seen map[int]bool) string {
	ns := slices.Sorted(maps.Keys(seen))
	switch {
	case len(ns) == 0:
		return "no trial"
	case len(ns) > 1:
		return fmt.Sprintf("%d to %d trials", ns[0], ns[len(ns)-1])
	case ns[0] == 1:
		return "1 trial"
	}
	return fmt.Sprintf("%d trials", ns[0])
}
