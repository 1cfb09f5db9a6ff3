package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-cmdtest"
)

// statementFile is the in-toto statement the runner writes beside the
// manifest (the fixture's were rendered by internal/evidence).
const statementFile = "statement.intoto.json"

// followManifest makes DIR's statement agree with DIR's manifest again
// after a forgery wrote the manifest, as a forger covering their tracks
// would, and from the manifest alone: its subjects become manifest.files
// and manifest.json (with the SHA-256 of its bytes), its configuration the
// source commit and the case sources. Its tests and result stay as the
// runner wrote them: saying which runs passed is the audit's verdict, and
// a forged run the statement still calls passed is the audit's to catch.
// A folder without a statement, or whose manifest or statement does not
// parse as JSON, is left as it is.
func followManifest(dir string) error {
	name := filepath.Join(dir, statementFile)
	st, err := readJSON(name)
	if err != nil {
		return nil
	}
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil
	}
	var m struct {
		SourceCommit string            `json:"source_commit"`
		Sources      map[string]string `json:"sources"`
		Files        map[string]string `json:"files"`
	}
	if json.Unmarshal(mb, &m) != nil {
		return nil
	}
	type desc struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	}
	sum := sha256.Sum256(mb)
	subjects := []desc{{"manifest.json", map[string]string{"sha256": hex.EncodeToString(sum[:])}}}
	for n, s := range m.Files {
		subjects = append(subjects, desc{n, map[string]string{"sha256": s}})
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	config := []desc{{"source_commit", map[string]string{"gitCommit": m.SourceCommit}}}
	var cases []string
	for p := range m.Sources {
		if strings.HasPrefix(p, "cases/") {
			cases = append(cases, p)
		}
	}
	sort.Strings(cases)
	for _, p := range cases {
		config = append(config, desc{p, map[string]string{"sha256": m.Sources[p]}})
	}
	st["subject"] = subjects
	if pred, ok := st["predicate"].(map[string]any); ok {
		pred["configuration"] = config
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		return err
	}
	return writeFile(name, b.Bytes())
}

// followAfter calls followManifest when the file just written is a
// manifest.
func followAfter(name string) error {
	if filepath.Base(name) != "manifest.json" {
		return nil
	}
	return followManifest(filepath.Dir(name))
}

// The pinned build, spelled out here instead of taken from the audit or
// the lab: go build FLAGS -o OUT ./cmd/effectserver with ENV added to the
// environment, as the runner builds the server and audit -rebuild rebuilds
// it (which also sets GOTOOLCHAIN=local and GOENV=off). A rebuild that
// reproduces pin's hash shows the audit builds with exactly this recipe.
var (
	pinnedFlags = []string{"-trimpath", "-buildvcs=false"}
	pinnedEnv   = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local", "GOENV=off"}
)

// pinned is one pinned build of a root's stand-in server.
type pinned struct{ sum, goVersion string }

// pins caches pinBuild's answers by what the build reads (the stand-in's
// source, go.mod, the target): every .ct file's root is a copy of one
// fixture, and -trimpath keeps the folder out of the binary.
var pins sync.Map

// pinBuild builds root's ./cmd/effectserver for osArch (GOOS/GOARCH) with
// the pinned recipe and the local Go, and returns the binary's SHA-256 and
// that Go's version.
func pinBuild(root, osArch string) (pinned, error) {
	goos, goarch, ok := strings.Cut(osArch, "/")
	if !ok {
		return pinned{}, fmt.Errorf("os_arch %q: not GOOS/GOARCH", osArch)
	}
	key := sha256.New()
	for _, f := range []string{"cmd/effectserver/main.go", "go.mod"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return pinned{}, err
		}
		fmt.Fprintf(key, "%s %d\n%s", f, len(data), data)
	}
	fmt.Fprintf(key, "%s\n", osArch)
	k := hex.EncodeToString(key.Sum(nil))
	if p, ok := pins.Load(k); ok {
		return p.(pinned), nil
	}
	env := append(append(os.Environ(), pinnedEnv...), "GOOS="+goos, "GOARCH="+goarch)
	tmp, err := os.MkdirTemp("", "audit-pin")
	if err != nil {
		return pinned{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "effectserver")
	build := exec.Command("go", append(append([]string{"build"}, pinnedFlags...), "-o", bin, "./cmd/effectserver")...)
	build.Dir, build.Env = root, env
	if out, err := build.CombinedOutput(); err != nil {
		return pinned{}, fmt.Errorf("pinned build: %v\n%s", err, out)
	}
	ver := exec.Command("go", "env", "GOVERSION")
	ver.Dir, ver.Env = root, env
	out, err := ver.Output()
	if err != nil {
		return pinned{}, fmt.Errorf("go env GOVERSION: %v", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return pinned{}, err
	}
	sum := sha256.Sum256(data)
	p := pinned{hex.EncodeToString(sum[:]), strings.TrimSpace(string(out))}
	pins.Store(k, p)
	return p, nil
}

// pin records in DIR/manifest.json the SHA-256 and the Go version of
// root's stand-in server built for the manifest's os_arch by pinBuild; the
// statement follows the manifest.
func pin(root, dir string) error {
	name := filepath.Join(dir, "manifest.json")
	m, err := readJSON(name)
	if err != nil {
		return err
	}
	osArch, _ := m["os_arch"].(string)
	p, err := pinBuild(root, osArch)
	if err != nil {
		return err
	}
	return editJSON(name, func(m map[string]any) {
		m["server_sha256"], m["go_version"] = p.sum, p.goVersion
	})
}

// The chaos forgeries of the forge-chaos-*.ct goldens, on the fixture's
// chaos/ folder (runner -experiment chaos -duration 1s, see
// testdata/fixture/README.md).

// historyLines reads DIR/chaos-STORE.jsonl as decoded lines (key order is
// kept by re-encoding through json.RawMessage-free maps: the audit does
// not care about member order).
func historyLines(dir, store string) ([]map[string]any, error) {
	data, err := os.ReadFile(filepath.Join(dir, "chaos-"+store+".jsonl"))
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// writeHistory writes the lines back and records the file's SHA-256.
func writeHistory(dir, store string, lines []map[string]any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	name := "chaos-" + store + ".jsonl"
	if err := writeFile(filepath.Join(dir, name), b.Bytes()); err != nil {
		return err
	}
	return rehash(dir, name)
}

func num(v any) int64 {
	n, _ := v.(json.Number)
	i, _ := n.Int64()
	return i
}

// editChaosCounts adds delta to counts of STORE's run in DIR/chaos.json
// and sets its latency percentiles from the history, as a forger keeping
// chaos.json consistent with a forged history would; then rehashes.
func editChaosCounts(dir, store string, lines []map[string]any, delta map[string]int64) error {
	var lat []int64
	for _, l := range lines {
		if l["kind"] == "attempt" && l["type"] == "ok" {
			lat = append(lat, num(l["end_us"])-num(l["start_us"]))
		}
	}
	slices.Sort(lat)
	rank := func(p int) int64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[max((p*len(lat)+99)/100, 1)-1]
	}
	return editArray(dir, "chaos.json", "runs", func(runs []any) ([]any, error) {
		for _, r := range runs {
			run := r.(map[string]any)
			if run["store"] != store {
				continue
			}
			counts := run["counts"].(map[string]any)
			for k, d := range delta {
				counts[k] = num(counts[k]) + d
			}
			counts["latency_ok_p50_us"], counts["latency_ok_p99_us"] = rank(50), rank(99)
			return runs, nil
		}
		return nil, fmt.Errorf("chaos.json: no run of %s", store)
	})
}

// addChaosCommands adds the chaos forgeries to the goldens' commands.
func addChaosCommands(cmds map[string]cmdtest.CommandFunc) {
	// chaos-ack DIR STORE: add a 200 reply for a new intent 999999 that the
	// journal never applied, after every other event and with a value no
	// effect has (so that only the lost acknowledgement and its value are
	// flagged, the same way in every run); chaos.json's counts follow.
	cmds["chaos-ack"] = command(2, "chaos-ack DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "place" })
		last := lines[i-1]
		at := num(last["start_us"]) + num(last["at_us"])
		sum := sha256.Sum256([]byte("forged intent"))
		ack := map[string]any{"kind": "attempt", "intent": 999999, "key": "chaos-999999", "body_sha256": hex.EncodeToString(sum[:]),
			"replica": 0, "attempt": 0, "phase": "quiet", "start_us": at, "end_us": at + 1000, "fault": "", "type": "ok",
			"outcome": "reply", "status": 200, "value": "1000000000", "replayed": false, "error": ""}
		lines = slices.Insert(lines, i, ack)
		lines[0]["attempts"] = num(lines[0]["attempts"]) + 1
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editChaosCounts(args[0], args[1], lines, map[string]int64{"intents": 1, "attempts": 1, "quiet_attempts": 1,
			"ok": 1, "acked": 1, "not_applied": 1, "unresolved_after_chaos": 1})
	})
	// chaos-stuck DIR STORE: turn intent 0's 200 reply into a timeout (no
	// reply): the intent is never acknowledged; chaos.json's counts follow
	// but for stuck.
	cmds["chaos-stuck"] = command(2, "chaos-stuck DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool {
			return l["kind"] == "attempt" && num(l["intent"]) == 0 && l["type"] == "ok"
		})
		if i < 0 {
			return fmt.Errorf("intent 0 has no 200 reply")
		}
		l := lines[i]
		l["type"], l["outcome"], l["status"], l["value"], l["replayed"], l["error"] = "info", "timeout", 0, "", nil, "timeout"
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editChaosCounts(args[0], args[1], lines, map[string]int64{"ok": -1, "info": 1, "acked": -1})
	})
	// chaos-hide DIR STORE: remove the journal's last effect (as a forger
	// hiding the second effect of a duplicated intent would), with the
	// place's counter and chaos.json's counts adjusted.
	cmds["chaos-hide"] = command(2, "chaos-hide DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		last := len(lines) - 1
		if lines[last]["kind"] != "effect" {
			return fmt.Errorf("the history does not end with an effect")
		}
		lines = lines[:last]
		for j := last - 1; j >= 0; j-- {
			if lines[j]["kind"] == "place" {
				lines[j]["counter"] = num(lines[j]["counter"]) - 1
				lines[j]["effects"] = num(lines[j]["effects"]) - 1
				break
			}
		}
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editChaosCounts(args[0], args[1], lines, map[string]int64{"effects": -1, "applied_once": -1, "not_applied": 1})
	})
}
