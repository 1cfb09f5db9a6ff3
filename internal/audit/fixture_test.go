package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fixture is a mini checkout (the repo's real schema/, the seven volatile
// cases pinned in testdata/cases so the tests do not move with cases/, a
// few fake sources) with an evidence folder whose results satisfy every
// expectation of those cases, a manifest with computed hashes, and the
// files the audit derives of them.
type fixture struct {
	root     string
	evidence string
}

// newFixture returns a fresh copy of the store fixture (buildFixture).
func newFixture(t *testing.T) *fixture {
	t.Helper()
	return fromTemplate(t, "store", buildFixture)
}

// templates are the fixtures built so far, by name: each folder is built
// once per test binary and copied for every test, far cheaper than
// building it again (a build has the audit derive its files). TestMain
// removes them.
var (
	templateMu sync.Mutex
	templates  = map[string]string{}
)

// fromTemplate returns a copy, in t's temporary folder, of the fixture
// build makes (built on first use).
func fromTemplate(t *testing.T, name string, build func(t *testing.T) *fixture) *fixture {
	t.Helper()
	templateMu.Lock()
	defer templateMu.Unlock()
	dir, ok := templates[name]
	if !ok {
		built := build(t)
		var err error
		if dir, err = os.MkdirTemp("", "audit-fixture-"+name+"-"); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(dir, os.DirFS(built.root)); err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		templates[name] = dir
	}
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return &fixture{root: root, evidence: filepath.Join(root, "evidence")}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range templates {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// buildFixture builds the store fixture.
func buildFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{root: root, evidence: filepath.Join(root, "evidence")}
	for dir, from := range map[string]string{"schema": filepath.Join("..", "..", "schema"), "cases": filepath.Join("testdata", "cases")} {
		entries, err := os.ReadDir(from)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(from, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			f.write(t, dir+"/"+e.Name(), string(data))
		}
	}
	f.write(t, "go.mod", "module fake\n\ngo 1.26\n")
	f.write(t, "go.sum", "")
	f.write(t, "internal/fake/fake.go", "package fake\n\nconst X = 1\n")
	f.write(t, "cmd/fake/main.go", "package main\n\nfunc main() {}\n")
	// The protocol constants, pinned in testdata like the cases.
	for _, n := range []string{"protocol.go", "key.go"} {
		data, err := os.ReadFile(filepath.Join("testdata", "protocol", n))
		if err != nil {
			t.Fatal(err)
		}
		f.write(t, "internal/protocol/"+n, string(data))
	}
	// Not sources: a test file and anything below testdata.
	f.write(t, "internal/fake/fake_test.go", "package fake\n")
	f.write(t, "cmd/fake/testdata/golden.ct", "$ fake\n")

	runs := f.expandRuns(t)
	f.writeJSON(t, "evidence/results.json", map[string]any{"schema_version": 1, "runs": runs})
	f.writeJSON(t, "evidence/run.json", map[string]any{
		"schema_version": 1, "started_utc": "2025-01-01T00:00:00Z", "wall_ms": 1, "parallel": 1, "runs": runDetails(runs),
	})
	f.writeJSON(t, "evidence/manifest.json", map[string]any{
		"schema_version": 1,
		"generated_utc":  "2025-01-01T00:00:00Z",
		"source_commit":  strings.Repeat("ab", 20),
		"source_dirty":   false,
		"go_version":     "go1.26",
		"os_arch":        "linux/amd64",
		"server_sha256":  strings.Repeat("0", 64),
		"protocol":       protocolDoc(),
		"selection":      map[string]any{"cases": f.caseNames(t), "stores": []string{"volatile"}, "targets": []string{}, "experiments": []string{}},
		"flags":          map[string]string{},
		"targets":        []any{},
		"sources":        map[string]string{},
		"files":          map[string]string{},
	})
	f.rehash(t)
	return f
}

// protocolDoc is manifest.json's protocol: the lab's constants, as
// testdata/protocol pins them.
func protocolDoc() map[string]any {
	return map[string]any{
		"key_header": "Idempotency-Key", "replayed_header": "Idempotency-Replayed",
		"fault_header": "X-Lab-Fault", "key_pattern": "[A-Za-z0-9_-]{1,64}",
		"default_body": "add-one", "capacity": 64, "max_body": 4096, "wait_ms": 5000,
		"slow_ms": 120, "crash_exit_code": 23, "client_timeout_ms": 5000,
	}
}

func (f *fixture) path(rel string) string { return filepath.Join(f.root, filepath.FromSlash(rel)) }

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) writeJSON(t *testing.T, rel string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, rel, string(data)+"\n")
}

func (f *fixture) readJSON(t *testing.T, rel string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(f.path(rel))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// editJSON rewrites an evidence JSON file through edit (hashes untouched).
func (f *fixture) editJSON(t *testing.T, rel string, edit func(map[string]any)) {
	t.Helper()
	v := f.readJSON(t, rel)
	edit(v)
	f.writeJSON(t, rel, v)
}

// run returns results.json's run i, for edits.
func run(doc map[string]any, i int) map[string]any {
	return doc["runs"].([]any)[i].(map[string]any)
}

// runOf returns the run of case name in results.json.
func runOf(doc map[string]any, name string) map[string]any {
	for _, r := range doc["runs"].([]any) {
		if r.(map[string]any)["case"] == name {
			return r.(map[string]any)
		}
	}
	panic("no run " + name)
}

// rehash recomputes manifest.files and manifest.sources, written
// independently of the code under test, then has the audit derive its
// files again (derive), as a forger with the audit's own code would.
func (f *fixture) rehash(t *testing.T) {
	t.Helper()
	files := map[string]string{}
	filepath.WalkDir(f.evidence, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(f.evidence, p)
		if rel == "manifest.json" || derivedName(filepath.ToSlash(rel)) {
			return nil
		}
		data, _ := os.ReadFile(p)
		sum := sha256.Sum256(data)
		files[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	sources := map[string]string{}
	add := func(rel string) {
		data, err := os.ReadFile(f.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
		sources[rel] = hex.EncodeToString(sum[:])
	}
	add("go.mod")
	add("go.sum")
	add("internal/fake/fake.go")
	add("cmd/fake/main.go")
	add("internal/protocol/key.go")
	add("internal/protocol/protocol.go")
	for _, dir := range []string{"cases", "schema"} {
		entries, _ := os.ReadDir(f.path(dir))
		for _, e := range entries {
			add(dir + "/" + e.Name())
		}
	}
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["files"] = files
		m["sources"] = sources
	})
	f.derive(t)
}

// derive has the audit write its derived files (REPORT.md, verdicts.json,
// the statement, ...) for the evidence as it now is: a careful forger's
// last step, so that each test breaks one rule at a time. An audit that
// cannot read the folder (a test of that) derives nothing. It is a whole
// audit: call it once a test has made its edits (rehash does).
func (f *fixture) derive(t *testing.T) {
	t.Helper()
	Audit(Options{Root: f.root, Evidence: f.evidence, AllowDirty: true, AllowMutation: true, Write: true})
}

// derivedName reports whether rel is a file the audit derives, never the
// runner: the fixture's own list, not the code under test's.
func derivedName(rel string) bool {
	switch rel {
	case "REPORT.md", "TARGETS.md", "MATRIX.md", "matrix.svg", "verdicts.json", "jitter.svg", "statement.intoto.json", "statement.intoto.dsse.json":
		return true
	}
	return strings.HasPrefix(rel, "chaos-") && strings.HasSuffix(rel, ".svg")
}

// keeping runs forge, then puts the evidence files names back as they
// were before it: a forger who changed the observations (and rehashed,
// and derived the rest again) but kept the audit's earlier renderings.
func (f *fixture) keeping(t *testing.T, names []string, forge func()) {
	t.Helper()
	kept := map[string][]byte{}
	for _, n := range names {
		kept[n] = mustRead(t, f.path("evidence/"+n))
	}
	forge()
	for _, n := range names {
		f.write(t, "evidence/"+n, string(kept[n]))
	}
}

// readVerdicts reads the folder's verdicts.json.
func (f *fixture) readVerdicts(t *testing.T) verdictsDoc {
	t.Helper()
	var v verdictsDoc
	if err := json.Unmarshal(mustRead(t, f.path("evidence/"+VerdictsFile)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

type caseDoc struct {
	name   string
	steps  []any
	expect map[string]any
}

func (f *fixture) caseDocs(t *testing.T) []caseDoc {
	t.Helper()
	entries, err := os.ReadDir(f.path("cases"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []caseDoc
	for _, n := range names {
		doc := f.readJSON(t, "cases/"+n)
		out = append(out, caseDoc{doc["name"].(string), doc["steps"].([]any), doc["expect"].(map[string]any)})
	}
	return out
}

func (f *fixture) caseNames(t *testing.T) []string {
	var names []string
	for _, c := range f.caseDocs(t) {
		names = append(names, c.name)
	}
	return names
}

// sent is one call a case's steps send, expanded independently of the
// audit's own plan: step index, key, fault, concurrent group size.
type sent struct {
	step       int
	key, fault any
	group      int
}

func sentCalls(steps []any) []sent {
	var out []sent
	for i, st := range steps {
		sm := st.(map[string]any)
		call, clients := sm["call"], 1
		if g, ok := sm["concurrent"].(map[string]any); ok {
			call, clients = g["call"], int(num(g["clients"]))
		}
		cm, ok := call.(map[string]any)
		if !ok {
			continue // a restart
		}
		repeat := max(int(num(cm["repeat"])), 1)
		for r := 0; r < repeat; r++ {
			var key any
			if k, ok := cm["key"].(string); ok {
				key = strings.ReplaceAll(k, "{i}", strconv.Itoa(r))
			}
			for range clients {
				out = append(out, sent{step: i, key: key, fault: cm["fault"], group: clients})
			}
		}
	}
	return out
}

func num(v any) int64 {
	n, _ := v.(json.Number)
	i, _ := n.Int64()
	return i
}

// serverTexts are the effect server's reply bodies, the fixture's copy.
var serverTexts = map[int64]string{
	400: "Idempotency-Key: key has a character outside [A-Za-z0-9_-]\n",
	413: "request body larger than 4096 bytes\n",
	409: "request with this Idempotency-Key is still in progress\n",
	422: "Idempotency-Key already used with another request body\n",
	429: "Idempotency-Key registry is full\n",
}

// expandRuns builds one volatile run per case that meets its expectation
// and sends what its steps send.
func (f *fixture) expandRuns(t *testing.T) []any {
	var runs []any
	for _, c := range f.caseDocs(t) {
		exp := c.expect["volatile"].(map[string]any)
		plan := sentCalls(c.steps)
		var calls []any
		for _, ec := range exp["calls"].([]any) {
			ec := ec.(map[string]any)
			repeat := max(int(num(ec["repeat"])), 1)
			for i := 1; i <= repeat; i++ {
				p := plan[len(calls)]
				call := map[string]any{"step": p.step, "key": p.key, "fault": p.fault, "outcome": ec["outcome"],
					"status": nil, "body": nil, "replayed": nil}
				if ec["outcome"] == "reply" {
					call["status"], call["body"], call["replayed"] = json.Number("200"), "1", false
					if s, ok := ec["status"]; ok {
						call["status"] = s
						if text, ok := serverTexts[num(s)]; ok {
							call["body"] = text
						}
					}
					if b, ok := ec["body"].(string); ok {
						call["body"] = strings.ReplaceAll(b, "{n}", strconv.Itoa(i))
					}
					if r, ok := ec["replayed"]; ok {
						call["replayed"] = r
					}
				}
				calls = append(calls, call)
			}
		}
		runs = append(runs, map[string]any{"case": c.name, "store": "volatile",
			"counter": exp["counter"], "exit_codes": exp["exit_codes"], "calls": calls})
	}
	return runs
}

// runDetails is run.json's runs for results' runs: one server per exit
// code, one detail per call, launch indexes in order.
func runDetails(results []any) []any {
	var out []any
	for _, r := range results {
		r := r.(map[string]any)
		var servers, calls []any
		for i, code := range r["exit_codes"].([]any) {
			servers = append(servers, map[string]any{"pid": 100 + i, "addr": "127.0.0.1:4000" + strconv.Itoa(i), "ready_ms": 1.5, "exit_code": code})
		}
		step, client := -1, 0
		for _, c := range r["calls"].([]any) {
			c := c.(map[string]any)
			if s := num(c["step"]); int(s) != step || c["key"] != "parallel" {
				step, client = int(s), 0
			}
			e := ""
			if c["outcome"] != "reply" {
				e = "EOF"
			}
			calls = append(calls, map[string]any{"latency_ms": 2.25, "error": e, "client": client})
			client++
		}
		out = append(out, map[string]any{"case": r["case"], "store": r["store"], "wall_ms": 10, "servers": servers,
			"calls": calls, "server_log": []any{"server 0: start"}})
	}
	return out
}

// syncRunFile rewrites run.json to match results.json's runs (hashes
// untouched).
func (f *fixture) syncRunFile(t *testing.T) {
	t.Helper()
	runs := f.readJSON(t, "evidence/results.json")["runs"].([]any)
	f.editJSON(t, "evidence/run.json", func(d map[string]any) { d["runs"] = runDetails(runs) })
}
