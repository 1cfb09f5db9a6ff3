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
	"regexp"
	"slices"

	"github.com/google/go-cmdtest"
)

// Chaos evidence for the forge-chaos-*.ct goldens. The goldens' base
// runner predates the chaos experiment, so chaosEvidence makes a second
// checkout, snapshot/head: the repository's HEAD with the audit's own
// files from the working tree, as a one-commit git repository, and runs
// its runner there: go run ./cmd/runner -experiment chaos -duration 1s
// -out head/chaos. A .ct file audits it with audit -root head head/chaos.
func chaosEvidence(repo, snapshot string) error {
	head := filepath.Join(snapshot, "head")
	if err := os.MkdirAll(head, 0o755); err != nil {
		return err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", repo, head)
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive HEAD: %v\n%s", err, out)
	}
	for _, p := range ownPaths {
		os.RemoveAll(filepath.Join(head, p))
		if err := copyTree(filepath.Join(repo, p), filepath.Join(head, p)); err != nil {
			return err
		}
	}
	os.RemoveAll(filepath.Join(head, "evidence"))
	if err := gitCommitAll(head); err != nil {
		return err
	}
	out := filepath.Join(filepath.Dir(snapshot), "chaos")
	cmd := exec.Command("go", "run", "./cmd/runner", "-experiment", "chaos", "-duration", "1s", "-out", out)
	cmd.Dir = head
	b, err := cmd.CombinedOutput()
	if _, serr := os.Stat(filepath.Join(out, "chaos.json")); serr != nil {
		return fmt.Errorf("runner -experiment chaos: %v\n%s", err, b)
	}
	// (The runner's own audit may fail the folder: the goldens show why.)
	return os.CopyFS(filepath.Join(head, "chaos"), os.DirFS(out))
}

// chaosScrubs hide what differs between runs of one seed in the chaos
// goldens' failure lines: intent numbers, attempts, replicas and values.
var chaosScrubs = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`intent \d+ \(key chaos-\d+\)`), "intent N (key chaos-N)"},
	{regexp.MustCompile(`attempt \d+ on replica \d+ got 200 "\d+"`), `attempt A on replica R got 200 "V"`},
	// How many crash faults fired in a chaos run depends on timing.
	{regexp.MustCompile(`counts\.crash_exits: expected \d+ \((re-derived from chaos-\w+\.jsonl)\), observed \d+`), `counts.crash_exits: expected N (${1}), observed N`},
	// A finding names its rule and intent: rule/intent.
	{regexp.MustCompile(`(verdict\.findings: expected \w+)/\d+`), `${1}/N`},
}

func init() {
	for _, s := range chaosScrubs {
		scrubs = append(scrubs, s)
	}
}

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
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
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
