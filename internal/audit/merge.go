package audit

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"

	"idemlab/internal/audit/shard"
)

// This file joins the slices of a run (runner -shard K/N, one folder per
// slice, maybe from N machines) into one evidence folder, as the whole
// run would have written it, and audits that like a whole run: audit
// -merge. Each slice must pass its own audit first; slices that overlap,
// leave a slice out, or differ in anything but their cells (sources,
// commit, seed, knobs, selection, machine, a target's folder or library
// versions) are refused before anything is written.

// MergeOptions is one audit -merge.
type MergeOptions struct {
	Root          string   // the checkout the slices were made from
	Out           string   // the folder to write the whole run into: new, or empty
	Slices        []string // the slices' evidence folders
	AllowDirty    bool     // as Options
	AllowMutation bool     // as Options
	SignKey       string   // as Options: sign the merged run's statement
}

// ErrMerge is the error of slices that cannot be merged: its text says why.
var ErrMerge = errors.New("cannot merge")

// slicedFiles are the only files a slice holds besides its manifest: a
// slice runs cases, never an experiment.
var slicedFiles = []string{"results.json", "run.json", TargetsFile}

// A slicedRun is one slice as merge reads it.
type slicedRun struct {
	dir      string
	slice    shard.Slice
	manifest *object
	files    map[string]*object // by name, those its manifest lists
}

// Merge checks the slices, joins them into o.Out and audits the result
// (with -write: it derives the verdicts and reports of the whole run). It
// returns the merged folder's report; an error wrapping ErrMerge when the
// slices cannot be merged, another when an input cannot be read or the
// folder written.
func Merge(o MergeOptions) (*Report, error) {
	if len(o.Slices) == 0 {
		return nil, fmt.Errorf("%w: no slice given", ErrMerge)
	}
	runs, err := readSlices(o.Slices)
	if err != nil {
		return nil, err
	}
	for _, step := range []func([]*slicedRun) error{checkCover, checkSameRun} {
		if err := step(runs); err != nil {
			return nil, err
		}
	}
	for _, r := range runs {
		rep, err := Audit(Options{Root: o.Root, Evidence: r.dir, AllowDirty: o.AllowDirty, AllowMutation: o.AllowMutation})
		if err != nil {
			return nil, fmt.Errorf("audit slice %s: %w", r.dir, err)
		}
		if !rep.Pass {
			return nil, fmt.Errorf("%w: slice %s (%s) fails its own audit: %s (%s in all; run audit %s)", ErrMerge, r.slice, r.dir,
				rep.Failures[0].Message, plural(len(rep.Failures), "failed check"), r.dir)
		}
	}
	files, err := joinFiles(runs)
	if err != nil {
		return nil, err
	}
	if err := writeMerged(o.Out, runs, files); err != nil {
		return nil, err
	}
	return Audit(Options{Root: o.Root, Evidence: o.Out, AllowDirty: o.AllowDirty, AllowMutation: o.AllowMutation, Write: true, SignKey: o.SignKey})
}

// readSlices reads each slice's manifest and the files it lists.
func readSlices(dirs []string) ([]*slicedRun, error) {
	var runs []*slicedRun
	for _, dir := range dirs {
		if err := checkDir("slice", dir); err != nil {
			return nil, err
		}
		m, err := readObject(dir, "manifest.json")
		if err != nil {
			return nil, err
		}
		r := &slicedRun{dir: dir, manifest: m, files: map[string]*object{}}
		if r.slice, err = sliceOf(m); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMerge, filepath.Join(dir, "manifest.json"), err)
		}
		var listed map[string]string
		if err := json.Unmarshal(m.vals["files"], &listed); err != nil {
			return nil, fmt.Errorf("%s: files: %w", filepath.Join(dir, "manifest.json"), err)
		}
		for _, name := range sortedKeys(listed) {
			if !slices.Contains(slicedFiles, name) {
				return nil, fmt.Errorf("%w: slice %s lists %s: a slice holds only %v", ErrMerge, dir, name, slicedFiles)
			}
			if r.files[name], err = readObject(dir, name); err != nil {
				return nil, err
			}
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// sliceOf reads manifest.shard.
func sliceOf(m *object) (shard.Slice, error) {
	raw, ok := m.vals["shard"]
	if !ok {
		return shard.Slice{}, errors.New("no shard: a whole run, not a slice of one (runner -shard K/N makes a slice)")
	}
	var s struct{ K, N int }
	if err := json.Unmarshal(raw, &s); err != nil {
		return shard.Slice{}, fmt.Errorf("shard: %w", err)
	}
	out := shard.Slice{K: s.K, N: s.N}
	if err := out.Check(); err != nil || out.Whole() {
		return shard.Slice{}, fmt.Errorf("shard: %s: not a slice K/N", raw)
	}
	return out, nil
}

// checkCover refuses slices of different splits, two folders of one
// slice, and a slice left out: the merged run would hold a cell twice or
// lack one.
func checkCover(runs []*slicedRun) error {
	n := runs[0].slice.N
	by := map[int]string{}
	for _, r := range runs {
		switch prev, dup := by[r.slice.K]; {
		case r.slice.N != n:
			return fmt.Errorf("%w: %s is slice %s, %s slice %s: slices of different splits", ErrMerge, runs[0].dir, runs[0].slice, r.dir, r.slice)
		case dup:
			return fmt.Errorf("%w: %s and %s are both slice %s: they overlap", ErrMerge, prev, r.dir, r.slice)
		}
		by[r.slice.K] = r.dir
	}
	for k := 1; k <= n; k++ {
		if _, ok := by[k]; !ok {
			return fmt.Errorf("%w: slice %d/%d is missing: its cells would be missing from the run", ErrMerge, k, n)
		}
	}
	slices.SortFunc(runs, func(a, b *slicedRun) int { return cmp.Compare(a.slice.K, b.slice.K) })
	return nil
}

// sliceOwn are the manifest fields that differ from slice to slice of
// one run; every other field is the run's and must be equal.
var sliceOwn = []string{"shard", "generated_utc", "files"}

// checkSameRun refuses slices that are not of one run: the same sources,
// commit, build, protocol, selection, knobs, machine and targets.
func checkSameRun(runs []*slicedRun) error {
	first := runs[0]
	for _, r := range runs[1:] {
		keys := slices.Concat(first.manifest.keys, r.manifest.keys)
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			if slices.Contains(sliceOwn, k) {
				continue
			}
			if !sameJSON(first.manifest.vals[k], r.manifest.vals[k]) {
				return fmt.Errorf("%w: manifest.json %s differs between slice %s (%s) and slice %s (%s): not slices of one run (made from one commit, seed, selection and knobs, on alike machines)",
					ErrMerge, k, first.slice, first.dir, r.slice, r.dir)
			}
		}
		if slices.Compare(sortedKeys(first.files), sortedKeys(r.files)) != 0 {
			return fmt.Errorf("%w: slices %s and %s hold different files (%v, %v)", ErrMerge, first.slice, r.slice, sortedKeys(first.files), sortedKeys(r.files))
		}
	}
	return nil
}

// joinFiles joins the slices' files into the whole run's.
func joinFiles(runs []*slicedRun) (map[string][]byte, error) {
	var sel struct{ Cases []string }
	if err := json.Unmarshal(runs[0].manifest.vals["selection"], &sel); err != nil {
		return nil, fmt.Errorf("manifest.json selection: %w", err)
	}
	trials := 1
	var flags map[string]string
	if err := json.Unmarshal(runs[0].manifest.vals["flags"], &flags); err == nil && flags["trials"] != "" {
		if trials, err = strconv.Atoi(flags["trials"]); err != nil {
			return nil, fmt.Errorf("manifest.json flags.trials: %w", err)
		}
	}
	out := map[string][]byte{}
	for name := range runs[0].files {
		var doc *object
		var err error
		switch name {
		case "results.json":
			doc, err = joinStoreRuns(runs, name, sel.Cases, nil)
		case "run.json":
			doc, err = joinStoreRuns(runs, name, sel.Cases, runTimes)
		case TargetsFile:
			doc, err = joinTargets(runs, sel.Cases, trials)
		}
		if err != nil {
			return nil, err
		}
		data, err := marshalEvidence(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if c := capOf(name); int64(len(data)) > c {
			return nil, fmt.Errorf("%w: the merged %s would be %d bytes, over the audit's cap of %d: split the run by target (-target) instead", ErrMerge, name, len(data), c)
		}
		out[name] = data
	}
	return out, nil
}

// joinStoreRuns joins results.json or run.json: the runs in case-file
// order, then store order, as a whole run writes them; top, if not nil,
// sets the document's own fields from the slices'.
func joinStoreRuns(runs []*slicedRun, name string, cases []string, top func(doc *object, docs []*object) error) (*object, error) {
	type keyed struct {
		c, s int
		raw  json.RawMessage
	}
	var all []keyed
	var docs []*object
	for _, r := range runs {
		doc := r.files[name]
		docs = append(docs, doc)
		var list []json.RawMessage
		if err := json.Unmarshal(doc.vals["runs"], &list); err != nil {
			return nil, fmt.Errorf("%s: runs: %w", filepath.Join(r.dir, name), err)
		}
		for _, raw := range list {
			var k struct{ Case, Store string }
			if err := json.Unmarshal(raw, &k); err != nil {
				return nil, fmt.Errorf("%s: a run: %w", filepath.Join(r.dir, name), err)
			}
			all = append(all, keyed{slices.Index(cases, k.Case), slices.Index(StoreOrder, k.Store), raw})
		}
	}
	slices.SortStableFunc(all, func(a, b keyed) int { return cmp.Or(cmp.Compare(a.c, b.c), cmp.Compare(a.s, b.s)) })
	list := make([]json.RawMessage, len(all))
	for i, k := range all {
		list[i] = k.raw
	}
	doc := docs[0].clone()
	doc.set("runs", list)
	if top != nil {
		if err := top(doc, docs); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return doc, nil
}

// runTimes sets run.json's own fields: the run began when its first slice
// did, and took as long as its longest slice (they ran side by side).
func runTimes(doc *object, docs []*object) error {
	var began string
	var wall float64
	for _, d := range docs {
		var t struct {
			Started string  `json:"started_utc"`
			Wall    float64 `json:"wall_ms"`
		}
		b, _ := d.MarshalJSON()
		if err := json.Unmarshal(b, &t); err != nil {
			return err
		}
		if began == "" || t.Started < began {
			began = t.Started
		}
		wall = max(wall, t.Wall)
	}
	doc.set("started_utc", began)
	doc.set("wall_ms", wall)
	return nil
}

// joinTargets joins targets.json: each target once, its metadata equal
// in every slice, and per case its trials in trial order, the first in
// the record and the rest its further_trials, as a whole run writes them.
func joinTargets(runs []*slicedRun, cases []string, trials int) (*object, error) {
	var lists [][]*object
	for _, r := range runs {
		list, err := objects(r.files[TargetsFile].vals["targets"], "targets", "a target")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(r.dir, TargetsFile), err)
		}
		lists = append(lists, list)
	}
	var merged []*object
	for i, first := range lists[0] {
		name := first.text("name")
		for j, list := range lists[1:] {
			if i >= len(list) || list[i].text("name") != name {
				return nil, fmt.Errorf("%w: slice %s's targets.json does not list target %s at %d", ErrMerge, runs[j+1].slice, name, i)
			}
			for _, k := range first.keys {
				if k != "runs" && !sameJSON(first.vals[k], list[i].vals[k]) {
					return nil, fmt.Errorf("%w: target %s: %s differs between slice %s and slice %s (set up from other files, or on another machine)", ErrMerge, name, k, runs[0].slice, runs[j+1].slice)
				}
			}
		}
		t, err := joinTarget(runs, lists, i, cases, trials)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		merged = append(merged, t)
	}
	doc := runs[0].files[TargetsFile].clone()
	doc.set("targets", orEmpty(merged))
	return doc, nil
}

// joinTarget joins target i's runs: per case of the selection, the
// not-run record, or every trial from the slice that holds it.
func joinTarget(runs []*slicedRun, lists [][]*object, i int, cases []string, trials int) (*object, error) {
	name := lists[0][i].text("name")
	notRun := map[string]*object{}
	got := map[string]map[int]*object{} // by case, by trial: the trial's fields
	for j, list := range lists {
		recs, err := objects(list[i].vals["runs"], "runs", "a run")
		if err != nil {
			return nil, fmt.Errorf("slice %s: %w", runs[j].slice, err)
		}
		for _, rec := range recs {
			c := rec.text("case")
			if rec.text("not_run") != "" {
				notRun[c] = rec
				continue
			}
			held := runs[j].slice.Trials(name, c, trials)
			var further []*object
			if raw, ok := rec.vals["further_trials"]; ok {
				if further, err = objects(raw, "further_trials", "a further trial"); err != nil {
					return nil, fmt.Errorf("slice %s: case %s: %w", runs[j].slice, c, err)
				}
			}
			if len(held) != 1+len(further) {
				return nil, fmt.Errorf("%w: slice %s holds %d trials of case %s, where its share is %v", ErrMerge, runs[j].slice, 1+len(further), c, held)
			}
			if got[c] == nil {
				got[c] = map[int]*object{}
			}
			got[c][held[0]] = rec.without("case", "not_run", "further_trials")
			for k, tr := range further {
				got[c][held[k+1]] = tr
			}
		}
	}
	t := lists[0][i].clone()
	var out []*object
	for _, c := range cases {
		if rec, ok := notRun[c]; ok {
			out = append(out, rec)
			continue
		}
		rec := &object{vals: map[string]json.RawMessage{}}
		rec.set("case", c)
		rec.set("not_run", "")
		var further []*object
		for k := 1; k <= trials; k++ {
			tr, ok := got[c][k]
			if !ok {
				return nil, fmt.Errorf("%w: case %s: trial %d is in no slice", ErrMerge, c, k)
			}
			if k == 1 {
				for _, key := range tr.keys {
					rec.setRaw(key, tr.vals[key])
				}
				continue
			}
			further = append(further, tr)
		}
		if len(further) > 0 {
			rec.set("further_trials", further)
		}
		out = append(out, rec)
	}
	t.set("runs", orEmpty(out))
	return t, nil
}

// writeMerged writes the joined files into out, new or empty, and the
// manifest last: the first slice's, without its shard, generated when the
// last slice was, listing the joined files.
func writeMerged(out string, runs []*slicedRun, files map[string][]byte) error {
	if err := os.Mkdir(out, 0o755); err != nil {
		entries, rerr := os.ReadDir(out)
		if rerr != nil || len(entries) > 0 {
			return fmt.Errorf("%w: -out %s: want a new or empty folder (%v)", ErrMerge, out, err)
		}
	}
	listed := map[string]string{}
	for _, name := range sortedKeys(files) {
		if err := writeAtomic(filepath.Join(out, name), files[name]); err != nil {
			return err
		}
		listed[name] = sha256Hex(files[name])
	}
	m := runs[0].manifest.without("shard")
	latest := ""
	for _, r := range runs {
		var g string
		if err := json.Unmarshal(r.manifest.vals["generated_utc"], &g); err == nil && g > latest {
			latest = g
		}
	}
	m.set("generated_utc", latest)
	m.set("files", listed)
	data, err := marshalEvidence(m)
	if err != nil {
		return fmt.Errorf("manifest.json: %w", err)
	}
	return writeAtomic(filepath.Join(out, "manifest.json"), data)
}

// An object is a JSON object whose members keep their order and bytes: a
// merged file is the slices' bytes rearranged, never re-encoded values.
type object struct {
	keys []string
	vals map[string]json.RawMessage
}

// readObject reads a JSON object from a file of dir, within its cap.
func readObject(dir, name string) (*object, error) {
	data, err := readInside(dir, name, capOf(name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), unwrapPath(err))
	}
	o, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return o, nil
}

// decodeObject reads one JSON object, its members in order; a name given
// twice is refused.
func decodeObject(data []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	o := &object{vals: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if _, dup := o.vals[k]; dup {
			return nil, fmt.Errorf("%q given twice", k)
		}
		o.keys, o.vals[k] = append(o.keys, k), v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more after the object")
	}
	return o, nil
}

// objects reads raw as an array of JSON objects, each read by
// decodeObject; an error names list, or item when an element is wrong.
func objects(raw json.RawMessage, list, item string) ([]*object, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("%s: %w", list, err)
	}
	var out []*object
	for _, r := range raws {
		o, err := decodeObject(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", item, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func (o *object) clone() *object {
	return &object{keys: slices.Clone(o.keys), vals: maps.Clone(o.vals)}
}

// without is o less the members named.
func (o *object) without(names ...string) *object {
	c := o.clone()
	c.keys = slices.DeleteFunc(c.keys, func(k string) bool { return slices.Contains(names, k) })
	for _, n := range names {
		delete(c.vals, n)
	}
	return c
}

// set sets member k to v encoded, last if new.
func (o *object) set(k string, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", k, err)) // only values merge made itself: a bug
	}
	o.setRaw(k, raw)
}

func (o *object) setRaw(k string, raw json.RawMessage) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = raw
}

// text is member k as a string ("" if it is missing or not a string).
func (o *object) text(k string) string {
	var s string
	if err := json.Unmarshal(o.vals[k], &s); err != nil {
		return ""
	}
	return s
}

// MarshalJSON writes the members in their order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// sameJSON reports whether a and b hold the same JSON value, however
// written (space, escapes, member order); absent is not null.
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	return da.Decode(&va) == nil && db.Decode(&vb) == nil && reflect.DeepEqual(va, vb)
}
