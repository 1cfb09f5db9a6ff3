package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/go-cmdtest"

	"idemlab/internal/audit"
)

// statementFile is the in-toto statement the runner writes beside the
// manifest (the fixture's were rendered by internal/evidence).
const statementFile = "statement.intoto.json"

// envelopeFile is the DSSE envelope runner -sign writes beside it (the
// fixture's volatile/ folder is signed, testdata/fixture/README.md).
const envelopeFile = "statement.intoto.dsse.json"

// followManifest makes DIR's statement agree with DIR's manifest again
// after a forgery wrote the manifest, as a forger covering their tracks
// would, and from the manifest alone: its subjects become manifest.files
// and manifest.json (with the SHA-256 of its bytes), its configuration the
// source commit and the case sources. Its tests and result stay as the
// runner wrote them: saying which runs passed is the audit's verdict, and
// a forged run the statement still calls passed is the audit's to catch.
// A folder without a statement, or whose manifest or statement does not
// parse as JSON, is left as it is. A signed folder's envelope
// (statement.intoto.dsse.json) is removed: the forger cannot sign the new
// statement, and unsigned evidence is what they can pass off.
func followManifest(dir string) error {
	if err := os.Remove(filepath.Join(dir, envelopeFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
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

// historyLines reads DIR/chaos-NAME.jsonl as decoded lines (NAME a store,
// or target-T for target T; member order is not kept: the audit does not
// care about it).
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

// writeHistory writes the lines back and records the file's SHA-256, and
// draws the history's timeline again and records its SHA-256 too.
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
	if err := rehash(dir, name); err != nil {
		return err
	}
	// The timeline is drawn from the history alone: a forger draws it
	// again (here with the audit's renderer, the lab's drawing by spec).
	svg, err := audit.ChaosTimeline(b.Bytes())
	if err != nil {
		return nil // an unreadable history: no timeline to draw
	}
	svgName := "chaos-" + store + ".svg"
	if err := writeFile(filepath.Join(dir, svgName), svg); err != nil {
		return err
	}
	return rehash(dir, svgName)
}

// num reads a number of a decoded line: a json.Number as read, or an
// integer a forgery wrote into it.
func num(v any) int64 {
	switch n := v.(type) {
	case json.Number:
		i, _ := n.Int64()
		return i
	case int64:
		return n
	case int:
		return int64(n)
	case uint64:
		return int64(n)
	}
	return 0
}

// editChaosCounts adds delta to counts of NAME's run in DIR/chaos.json
// (NAME a store, or target-T for target T) and sets its latency
// percentiles from the history, as a forger keeping chaos.json consistent
// with a forged history would; then rehashes.
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
			if t, isTarget := strings.CutPrefix(store, "target-"); isTarget && run["target"] != t || !isTarget && run["store"] != store {
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
			"client": 0, "replica": 0, "attempt": 0, "phase": "quiet", "start_us": at, "end_us": at + 1000, "fault": "", "type": "ok",
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
	// chaos-fault DIR NAME: change the fault the first faulted chaos-phase
	// attempt carried to another of one kind (slow, or drop-reply where it
	// was slow), with chaos.json's fault counts following: only the
	// schedule, drawn again from the seed, says what it was.
	cmds["chaos-fault"] = command(2, "chaos-fault DIR NAME", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool {
			return l["kind"] == "attempt" && l["phase"] == "chaos" && l["fault"] != ""
		})
		if i < 0 {
			return fmt.Errorf("no chaos-phase attempt carried a fault")
		}
		old := lines[i]["fault"].(string)
		repl := "slow"
		if old == "slow" {
			repl = "drop-reply"
		}
		lines[i]["fault"] = repl
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editChaosFaults(args[0], args[1], old, repl)
	})
	// chaos-unkill DIR NAME: turn the nemesis's first kill into a planned
	// kill skipped because the replica was down, with chaos.json's kills
	// and kills_skipped following.
	cmds["chaos-unkill"] = command(2, "chaos-unkill DIR NAME", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "kill" })
		if i < 0 {
			return fmt.Errorf("no kill in the history")
		}
		lines[i]["kind"], lines[i]["error"] = "kill_skipped", "the replica was down"
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editChaosCounts(args[0], args[1], lines, map[string]int64{"kills": -1, "kills_skipped": 1})
	})
}

// editChaosFaults moves one attempt's count in NAME's counts.faults in
// DIR/chaos.json from the kinds of fault old to those of fault repl, then
// rehashes.
func editChaosFaults(dir, name, old, repl string) error {
	kinds := func(v string) []string {
		var out []string
		for _, part := range strings.Split(v, ",") {
			k, _, _ := strings.Cut(part, "=")
			out = append(out, k)
		}
		return out
	}
	return editArray(dir, "chaos.json", "runs", func(runs []any) ([]any, error) {
		for _, r := range runs {
			run := r.(map[string]any)
			if t, isTarget := strings.CutPrefix(name, "target-"); isTarget && run["target"] != t || !isTarget && run["store"] != name {
				continue
			}
			faults := run["counts"].(map[string]any)["faults"].(map[string]any)
			for _, k := range kinds(old) {
				faults[k] = num(faults[k]) - 1
			}
			for _, k := range kinds(repl) {
				faults[k] = num(faults[k]) + 1
			}
			return runs, nil
		}
		return nil, fmt.Errorf("chaos.json: no run of %s", name)
	})
}

// The forgeries of issue 18's Why list that a determined forger makes:
// every hash recomputed, every derived file kept consistent. Each command
// edits DIR's history of STORE and chaos.json as the forger would and
// rehashes both.

// placeOf maps each replica of a history to its place.
func placeOf(lines []map[string]any) map[int64]int64 {
	out := map[int64]int64{}
	for _, l := range lines {
		if l["kind"] == "place" {
			for _, r := range l["replicas"].([]any) {
				out[num(r)] = num(l["place"])
			}
		}
	}
	return out
}

// renumber takes effect value v out of place pl's journal: every later
// effect of the place and every acknowledgement at the place with a later
// value moves down by one, and the place's counter and effects shrink.
func renumber(lines []map[string]any, pl, v int64) []map[string]any {
	places := placeOf(lines)
	out := lines[:0:0]
	for _, l := range lines {
		switch {
		case l["kind"] == "effect" && num(l["place"]) == pl && num(l["value"]) == v:
			continue
		case l["kind"] == "effect" && num(l["place"]) == pl && num(l["value"]) > v:
			l["value"] = num(l["value"]) - 1
		case l["kind"] == "place" && num(l["place"]) == pl:
			l["counter"], l["effects"] = num(l["counter"])-1, num(l["effects"])-1
		case l["kind"] == "attempt" && l["type"] == "ok" && places[num(l["replica"])] == pl:
			if w, err := strconv.ParseInt(l["value"].(string), 10, 64); err == nil && w > v {
				l["value"] = strconv.FormatInt(w-1, 10)
			}
		}
		out = append(out, l)
	}
	return out
}

// setVerdict sets STORE's verdict and counts in DIR/chaos.json through
// edit, then rehashes chaos.json.
func setVerdict(dir, store string, edit func(counts, verdict map[string]any)) error {
	return editArray(dir, "chaos.json", "runs", func(runs []any) ([]any, error) {
		for _, r := range runs {
			run := r.(map[string]any)
			if run["store"] == store {
				edit(run["counts"].(map[string]any), run["verdict"].(map[string]any))
				return runs, nil
			}
		}
		return nil, fmt.Errorf("chaos.json: no run of %s", store)
	})
}

// insertByTime inserts l among the attempt and event lines, in time order.
func insertByTime(lines []map[string]any, l map[string]any) []map[string]any {
	at := num(l["at_us"])
	i := slices.IndexFunc(lines, func(x map[string]any) bool {
		switch x["kind"] {
		case "run":
			return false
		case "attempt":
			return num(x["start_us"]) > at
		case "place", "effect":
			return true
		}
		return num(x["at_us"]) > at
	})
	return slices.Insert(lines, i, l)
}

// addForgeCommands adds the forgeries above to the goldens' commands.
func addForgeCommands(cmds map[string]cmdtest.CommandFunc) {
	// chaos-dedupe DIR STORE: every duplicated intent keeps one effect,
	// the one its acknowledgement names; the others leave the journal,
	// the later values (and acknowledgements) renumbered: a duplicate
	// hidden as issue 18 says. chaos.json's counts and verdict follow.
	cmds["chaos-dedupe"] = command(2, "chaos-dedupe DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		places := placeOf(lines)
		ack := map[string][2]int64{} // body -> place, value acknowledged
		intentSHA := map[int64]string{}
		for _, l := range lines {
			if l["kind"] == "attempt" {
				intentSHA[num(l["intent"])] = l["body_sha256"].(string)
				if l["type"] == "ok" {
					v, _ := strconv.ParseInt(l["value"].(string), 10, 64)
					ack[l["body_sha256"].(string)] = [2]int64{places[num(l["replica"])], v}
				}
			}
		}
		type eff struct{ place, value int64 }
		bySHA := map[string][]eff{}
		for _, l := range lines {
			if l["kind"] == "effect" {
				s := l["body_sha256"].(string)
				bySHA[s] = append(bySHA[s], eff{num(l["place"]), num(l["value"])})
			}
		}
		var drop []eff
		dups := int64(0)
		for s, es := range bySHA {
			if len(es) < 2 {
				continue
			}
			dups++
			keep := ack[s]
			for _, e := range es {
				if e.place != keep[0] || e.value != keep[1] {
					drop = append(drop, e)
				}
			}
		}
		// Later values first, so that each removal leaves the others' values as they are.
		slices.SortFunc(drop, func(a, b eff) int { return int(b.value - a.value) })
		for _, e := range drop {
			lines = renumber(lines, e.place, e.value)
		}
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return setVerdict(args[0], args[1], func(counts, verdict map[string]any) {
			counts["duplicates"], counts["applied_once"] = 0, num(counts["applied_once"])+dups
			counts["effects"] = num(counts["effects"]) - int64(len(drop))
			verdict["shown"] = 0
			for _, r := range verdict["rules"].([]any) {
				if m := r.(map[string]any); m["rule"] == "duplicate" {
					m["count"] = 0
				}
			}
			var kept []any
			for _, f := range verdict["findings"].([]any) {
				if f.(map[string]any)["rule"] != "duplicate" {
					kept = append(kept, f)
				}
			}
			if kept == nil {
				kept = []any{}
			}
			verdict["findings"], verdict["findings_listed"] = kept, len(kept)
		})
	})
	// chaos-cover DIR STORE: the first intent acknowledged on its first
	// attempt (not the journal's last effect) has its effect moved to the
	// journal's end, the values after it renumbered, and its
	// acknowledgement marked replayed with the new value: how issue 18's
	// forger covers a lost acknowledgement with an appended effect. No
	// count changes.
	cmds["chaos-cover"] = command(2, "chaos-cover DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		places := placeOf(lines)
		counter := map[int64]int64{}
		for _, l := range lines {
			if l["kind"] == "place" {
				counter[num(l["place"])] = num(l["counter"])
			}
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool {
			v, _ := strconv.ParseInt(fmt.Sprint(l["value"]), 10, 64)
			return l["kind"] == "attempt" && l["type"] == "ok" && num(l["attempt"]) == 0 && l["replayed"] == false &&
				v < counter[places[num(l["replica"])]]
		})
		if i < 0 {
			return fmt.Errorf("no intent acknowledged on its first attempt")
		}
		a := lines[i]
		pl := places[num(a["replica"])]
		v, _ := strconv.ParseInt(a["value"].(string), 10, 64)
		lines = renumber(lines, pl, v)
		last := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "place" && num(l["place"]) == pl })
		lines[last]["counter"], lines[last]["effects"] = num(lines[last]["counter"])+1, num(lines[last]["effects"])+1
		j := last + 1
		for j < len(lines) && lines[j]["kind"] == "effect" {
			j++
		}
		lines = slices.Insert(lines, j, map[string]any{"kind": "effect", "place": pl, "value": counter[pl], "body_sha256": a["body_sha256"],
			"key": nil, "replica": nil, "at_us": nil})
		a["value"], a["replayed"] = strconv.FormatInt(counter[pl], 10), true
		return writeHistory(args[0], args[1], lines)
	})
	// chaos-replayed DIR STORE: the first acknowledgement of an intent's
	// first attempt is marked replayed (nothing else changes: the lab's
	// checker skips replayed replies in its order checks).
	cmds["chaos-replayed"] = command(2, "chaos-replayed DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool {
			return l["kind"] == "attempt" && l["type"] == "ok" && num(l["attempt"]) == 0 && l["replayed"] == false
		})
		if i < 0 {
			return fmt.Errorf("no intent acknowledged on its first attempt")
		}
		lines[i]["replayed"] = true
		return writeHistory(args[0], args[1], lines)
	})
	// chaos-kill-remove DIR STORE: the first kill, its exit and the
	// replica's restart leave the history; chaos.json's counts follow.
	cmds["chaos-kill-remove"] = command(2, "chaos-kill-remove DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		k := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "kill" })
		if k < 0 {
			return fmt.Errorf("no kill")
		}
		r := num(lines[k]["replica"])
		removed := []int{k}
		for _, kind := range []string{"exit", "start"} {
			from := removed[len(removed)-1] + 1
			j := slices.IndexFunc(lines[from:], func(l map[string]any) bool { return l["kind"] == kind && num(l["replica"]) == r })
			if j < 0 {
				return fmt.Errorf("the kill has no %s after it", kind)
			}
			removed = append(removed, from+j)
		}
		for _, j := range slices.Backward(removed) {
			lines = slices.Delete(lines, j, j+1)
		}
		lines[0]["server_events"] = num(lines[0]["server_events"]) - 3
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return setVerdict(args[0], args[1], func(counts, _ map[string]any) {
			counts["kills"], counts["restarts"] = num(counts["kills"])-1, num(counts["restarts"])-1
		})
	})
	// chaos-kill-add DIR STORE: a kill of replica 0 a third into its
	// longest run up, its exit 1 ms later and a restart 40 ms later;
	// chaos.json's counts follow.
	cmds["chaos-kill-add"] = command(2, "chaos-kill-add DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		var from, best, bestFrom int64 = -1, 0, 0
		for _, l := range lines {
			if num(l["replica"]) != 0 {
				continue
			}
			switch l["kind"] {
			case "start":
				from = num(l["at_us"])
			case "exit", "stop", "kill":
				if from >= 0 && num(l["at_us"])-from > best {
					best, bestFrom = num(l["at_us"])-from, from
				}
				from = -1
			}
		}
		if best < 150_000 {
			return fmt.Errorf("replica 0 is never up for 150 ms")
		}
		at := bestFrom + best/3
		ev := func(kind string, at, code int64) map[string]any {
			planned := -1
			if kind == "kill" {
				planned = 0 // the first of the plan's: the reader wants a number
			}
			return map[string]any{"kind": kind, "replica": 0, "at_us": at, "pid": 1, "addr": "127.0.0.1:1", "exit_code": code, "planned": planned, "error": ""}
		}
		for _, e := range []map[string]any{ev("kill", at, 0), ev("exit", at+1000, -1), ev("start", at+40_000, 0)} {
			lines = insertByTime(lines, e)
		}
		lines[0]["server_events"] = num(lines[0]["server_events"]) + 3
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return setVerdict(args[0], args[1], func(counts, _ map[string]any) {
			counts["kills"], counts["restarts"] = num(counts["kills"])+1, num(counts["restarts"])+1
		})
	})
	// chaos-seed DIR STORE SEED: the history's header and chaos.json say
	// the run had another seed; nothing else changes.
	cmds["chaos-seed"] = command(3, "chaos-seed DIR STORE SEED", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		seed, err := strconv.ParseUint(args[2], 10, 64)
		if err != nil {
			return err
		}
		lines[0]["seed"] = seed
		if err := writeHistory(args[0], args[1], lines); err != nil {
			return err
		}
		return editArray(args[0], "chaos.json", "runs", func(runs []any) ([]any, error) {
			for _, r := range runs {
				if m := r.(map[string]any); m["store"] == args[1] {
					m["seed"] = seed
				}
			}
			return runs, nil
		})
	})
	// chaos-split DIR STORE: replica 1 leaves place 0 for a place of its
	// own, with no effects, as if each replica kept its own state.
	cmds["chaos-split"] = command(2, "chaos-split DIR STORE", func(args []string) error {
		lines, err := historyLines(args[0], args[1])
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "place" && num(l["place"]) == 0 })
		if i < 0 {
			return fmt.Errorf("no place 0")
		}
		lines[i]["replicas"] = []any{0}
		lines = append(lines, map[string]any{"kind": "place", "place": 1, "replicas": []any{1}, "counter": 0, "effects": 0})
		lines[0]["places"] = num(lines[0]["places"]) + 1
		return writeHistory(args[0], args[1], lines)
	})
	// retries-scale DIR NUM DEN: retries.json's intents and every row's
	// counts scaled by NUM/DEN, each row still adding up to the intents.
	cmds["retries-scale"] = command(3, "retries-scale DIR NUM DEN", func(args []string) error {
		n, err1 := strconv.ParseInt(args[1], 10, 64)
		d, err2 := strconv.ParseInt(args[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil || d == 0 {
			return fmt.Errorf("NUM and DEN: want integers, DEN not 0")
		}
		name := filepath.Join(args[0], "retries.json")
		doc, err := readJSON(name)
		if err != nil {
			return err
		}
		p := doc["parameters"].(map[string]any)
		intents := num(p["intents"]) * n / d
		p["intents"] = intents
		for _, r := range doc["rows"].([]any) {
			m := r.(map[string]any)
			lost, dup := num(m["lost"])*n/d, num(m["duplicated"])*n/d
			m["lost"], m["duplicated"], m["applied_once"] = lost, dup, intents-lost-dup
			m["sent"], m["refused"] = num(m["sent"])*n/d, num(m["refused"])*n/d
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(name, append(data, '\n')); err != nil {
			return err
		}
		return rehash(args[0], "retries.json")
	})
}
