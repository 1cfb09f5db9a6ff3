package docs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the tables of README.md and docs/*.md from ../evidence")

// The tables the README and these pages show are counted from the
// committed evidence, never typed: each sits between a
// "<!-- table:NAME -->" line and an "<!-- end table -->" line, and this
// test renders NAME from ../evidence and compares (go test ./docs -update
// rewrites them after the evidence is regenerated).
var tableRE = regexp.MustCompile(`(?s)(<!-- table:([a-z-]+) -->\n)(.*?)(<!-- end table -->)`)

// Ensure every table of the README and the docs pages is the committed
// evidence's.
func TestTablesFromEvidence(t *testing.T) {
	ev := loadEvidence(t, filepath.Join("..", "evidence"))
	files, _ := filepath.Glob("*.md")
	files = append(files, filepath.Join("..", "README.md"))
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out := tableRE.ReplaceAllFunc(b, func(m []byte) []byte {
			seen++
			sub := tableRE.FindSubmatch(m)
			name := string(sub[2])
			render, ok := tables[name]
			if !ok {
				t.Errorf("%s: unknown table %q", f, name)
				return m
			}
			want := render(ev)
			if string(sub[3]) != want && !*update {
				t.Errorf("%s: table %s differs from the committed evidence (go test ./docs -update):\ngot\n%swant\n%s", f, name, sub[3], want)
			}
			return append(append(append([]byte{}, sub[1]...), want...), sub[4]...)
		})
		if *update && !bytes.Equal(out, b) {
			if err := os.WriteFile(f, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no table found in README.md or docs/*.md")
	}
}

// caseVerdict is the audit's verdict on a case on a target (verdicts.json):
// over its trials, the worst verdict, racy where the trials disagree, and
// each verdict's count.
type caseVerdict struct {
	Safety       string         `json:"safety"`
	Effects      int64          `json:"effects"`
	SoundEffects int64          `json:"sound_effects"`
	Findings     []finding      `json:"findings"`
	Deviations   []finding      `json:"deviations"`
	Trials       int            `json:"trials"`
	Racy         bool           `json:"racy"`
	Tally        map[string]int `json:"tally"`
}

// evidenceDocs are the committed evidence files the tables read.
type evidenceDocs struct {
	results struct {
		Runs []struct {
			Case          string `json:"case"`
			Store         string `json:"store"`
			Counter       int64  `json:"counter"`
			LedgerCounter *int64 `json:"ledger_counter"`
		} `json:"runs"`
	}
	targets struct {
		Targets []struct {
			Name      string `json:"name"`
			Libraries []struct {
				Name, Version string
			} `json:"libraries"`
			Runtime string `json:"runtime"`
			Skipped string `json:"skipped"`
			Runs    []struct {
				Case   string `json:"case"`
				NotRun string `json:"not_run"`
				// Verdict is the audit's, from verdicts.json (joinVerdicts).
				Verdict *caseVerdict `json:"-"`
				Mirror  []string     `json:"mirror"`
			} `json:"runs"`
		} `json:"targets"`
	}
	retries struct {
		Rows []struct {
			Client      string `json:"client"`
			Registry    string `json:"registry"`
			Lost        int64  `json:"lost"`
			AppliedOnce int64  `json:"applied_once"`
			Duplicated  int64  `json:"duplicated"`
			Sent        int64  `json:"sent"`
			Refused     int64  `json:"refused"`
		} `json:"rows"`
	}
	chaos struct {
		Runs []map[string]any `json:"runs"`
	}
}

type finding struct {
	Rule       string `json:"rule"`
	Limitation string `json:"limitation"`
}

func loadEvidence(t *testing.T, dir string) *evidenceDocs {
	t.Helper()
	ev := &evidenceDocs{}
	for name, v := range map[string]any{"results.json": &ev.results, "targets.json": &ev.targets, "retries.json": &ev.retries, "chaos.json": &ev.chaos} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	joinVerdicts(t, dir, ev)
	return ev
}

// joinVerdicts puts each run on a target beside the audit's verdict on it
// (verdicts.json: the lab records, the audit judges).
func joinVerdicts(t *testing.T, dir string, ev *evidenceDocs) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	type verdict = caseVerdict
	var doc struct {
		Targets []struct {
			Target string `json:"target"`
			Runs   []struct {
				Case string `json:"case"`
				verdict
			} `json:"runs"`
		} `json:"targets"`
		Chaos []map[string]any `json:"chaos"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("verdicts.json: %v", err)
	}
	// A chaos run's counts are the audit's too.
	for _, r := range ev.chaos.Runs {
		for _, v := range doc.Chaos {
			if v["store"] == r["store"] && v["target"] == r["target"] && v["trial"] == r["trial"] {
				r["counts"], r["sink_faults"] = v["counts"], v["sink_faults"]
			}
		}
	}
	judged := map[[2]string]verdict{}
	for _, vt := range doc.Targets {
		for _, r := range vt.Runs {
			judged[[2]string{vt.Target, r.Case}] = r.verdict
		}
	}
	for i := range ev.targets.Targets {
		tg := &ev.targets.Targets[i]
		for j := range tg.Runs {
			r := &tg.Runs[j]
			v, ok := judged[[2]string{tg.Name, r.Case}]
			if !ok && r.NotRun == "" {
				t.Fatalf("verdicts.json: no verdict on target %s, case %s", tg.Name, r.Case)
			}
			r.Verdict = &v
		}
	}
}

// tables are the tables the pages show, by name.
var tables = map[string]func(*evidenceDocs) string{
	"stores":         storesTable,
	"targets":        targetsTable,
	"targets-matrix": targetsMatrix,
	"retries":        retriesTable,
	"chaos":          chaosTable,
}

// storesTable is the effects applied per case and store.
func storesTable(ev *evidenceDocs) string {
	var stores, cases []string
	cell := map[string]string{}
	for _, r := range ev.results.Runs {
		if !contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
		if !contains(cases, r.Case) {
			cases = append(cases, r.Case)
		}
		v := fmt.Sprintf("**%d**", r.Counter)
		if r.LedgerCounter != nil {
			v = fmt.Sprintf("ledger **%d**", *r.LedgerCounter)
		}
		cell[r.Case+"/"+r.Store] = v
	}
	var b strings.Builder
	b.WriteString("| case |")
	for _, s := range stores {
		b.WriteString(" " + s + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(stores)) + "\n")
	for _, c := range cases {
		b.WriteString("| `" + c + "` |")
		for _, s := range stores {
			b.WriteString(" " + cell[c+"/"+s] + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// targetsTable is one row per target: the code under test and its
// verdicts, a case counted under the worst verdict of its trials (racy:
// those whose trials disagree).
func targetsTable(ev *evidenceDocs) string {
	var b strings.Builder
	b.WriteString("| target | code under test | judged | pass | limitation | violation | racy | not run | safety findings | conformance deviations |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range ev.targets.Targets {
		if t.Skipped != "" {
			fmt.Fprintf(&b, "| `%s` | — | skipped: %s ||||||||\n", t.Name, t.Skipped)
			continue
		}
		var libs []string
		for _, l := range t.Libraries {
			libs = append(libs, l.Name+" "+l.Version)
		}
		code := strings.Join(libs, ", ")
		if code == "" {
			code = "the lab's own server"
		}
		counts := map[string]int{}
		var safety, conformance []string
		notRun, racy := 0, 0
		for _, r := range t.Runs {
			if r.NotRun != "" {
				notRun++
				continue
			}
			counts[r.Verdict.Safety]++
			if r.Verdict.Racy {
				racy++
			}
			for _, f := range r.Verdict.Findings {
				rule := f.Rule
				if f.Limitation != "" {
					rule += " (limitation)"
				}
				safety = append(safety, rule)
			}
			for _, f := range r.Verdict.Deviations {
				conformance = append(conformance, f.Rule)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d | %d | %d | %d | %s | %s |\n", t.Name, code,
			counts["pass"]+counts["limitation"]+counts["violation"], counts["pass"], counts["limitation"], counts["violation"], racy, notRun,
			counted(safety), counted(conformance))
	}
	return b.String()
}

// targetsMatrix is the safety verdict of every case on every target, for
// the cases that run on at least one target.
func targetsMatrix(ev *evidenceDocs) string {
	var b strings.Builder
	b.WriteString("| case |")
	for _, t := range ev.targets.Targets {
		b.WriteString(" `" + t.Name + "` |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(ev.targets.Targets)) + "\n")
	if len(ev.targets.Targets) == 0 {
		return b.String()
	}
	for i, r0 := range ev.targets.Targets[0].Runs {
		var cells []string
		ran := false
		for _, t := range ev.targets.Targets {
			if i >= len(t.Runs) {
				cells = append(cells, "—")
				continue
			}
			r := t.Runs[i]
			switch {
			case r.NotRun != "":
				cells = append(cells, "not run")
			default:
				ran = true
				c := r.Verdict.Safety
				if c == "violation" {
					c = "**VIOLATION**"
				}
				var rules []string
				for _, f := range r.Verdict.Findings {
					if !contains(rules, f.Rule) {
						rules = append(rules, f.Rule)
					}
				}
				if len(rules) > 0 {
					c += ": " + strings.Join(rules, ", ")
				}
				if r.Verdict.Racy {
					c += fmt.Sprintf(" (racy: %d/%d)", r.Verdict.Tally[r.Verdict.Safety], r.Verdict.Trials)
				}
				cells = append(cells, fmt.Sprintf("%d/%d %s", r.Verdict.Effects, r.Verdict.SoundEffects, c))
			}
		}
		if ran {
			fmt.Fprintf(&b, "| `%s` | %s |\n", r0.Case, strings.Join(cells, " | "))
		}
	}
	return b.String()
}

// retriesTable is the retries experiment's rows.
func retriesTable(ev *evidenceDocs) string {
	var b strings.Builder
	b.WriteString("| client | registry | lost | applied once | duplicated | sent | refused |\n|---|---|---|---|---|---|---|\n")
	for _, r := range ev.retries.Rows {
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d | %d | %d |\n", r.Client, r.Registry, r.Lost, r.AppliedOnce, r.Duplicated, r.Sent, r.Refused)
	}
	return b.String()
}

// chaosTable is the chaos experiment's counts per store or target.
func chaosTable(ev *evidenceDocs) string {
	var b strings.Builder
	b.WriteString("| store or target | trials | replicas | intents | attempts | faulted | fired at the sink | kill -9 | crash exits | duplicates | lost acks | stuck | p50 / p99 (ok, first trial) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	n := func(m map[string]any, k string) int64 { v, _ := m[k].(float64); return int64(v) }
	// A target's trials are one row: counts summed, and for a finding the
	// trials that showed it.
	var names []string
	runs := map[string][]map[string]any{}
	for _, r := range ev.chaos.Runs {
		name, _ := r["store"].(string)
		if tg, _ := r["target"].(string); tg != "" {
			name = "target `" + tg + "`"
		}
		if runs[name] == nil {
			names = append(names, name)
		}
		runs[name] = append(runs[name], r)
	}
	for _, name := range names {
		trials, first := runs[name], runs[name][0]
		if why, _ := first["not_run"].(string); why != "" {
			fmt.Fprintf(&b, "| %s | not run: %s ||||||||||||\n", name, why)
			continue
		}
		sum := map[string]int64{}
		shown := map[string]int{}
		// The faults armed at a target's effect sink: fired in how many of
		// the attempts they were armed for (a store's server takes its own).
		var armed, fired int64
		for _, r := range trials {
			c, _ := r["counts"].(map[string]any)
			for _, k := range []string{"intents", "attempts", "faulted_attempts", "kills", "crash_exits", "duplicates", "lost_acks", "stuck"} {
				sum[k] += n(c, k)
				if n(c, k) > 0 {
					shown[k]++
				}
			}
			sf, _ := r["sink_faults"].(map[string]any)
			for _, f := range sf {
				m, _ := f.(map[string]any)
				armed, fired = armed+n(m, "armed"), fired+n(m, "fired")
			}
		}
		atSink := "—"
		if armed > 0 {
			atSink = fmt.Sprintf("%d of %d", fired, armed)
		}
		finding := func(k string) string {
			if len(trials) == 1 || sum[k] == 0 {
				return fmt.Sprintf("**%d**", sum[k])
			}
			return fmt.Sprintf("**%d** (%d of %d)", sum[k], shown[k], len(trials))
		}
		p, _ := first["parameters"].(map[string]any)
		c, _ := first["counts"].(map[string]any)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %d | %d | %s | %s | %s | %.1f / %.1f ms |\n", name, len(trials), n(p, "replicas"),
			sum["intents"], sum["attempts"], sum["faulted_attempts"], atSink, sum["kills"], sum["crash_exits"], finding("duplicates"), finding("lost_acks"), finding("stuck"),
			float64(n(c, "latency_ok_p50_us"))/1000, float64(n(c, "latency_ok_p99_us"))/1000)
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// counted renders occurrences as "rule ×N", in first-seen order.
func counted(list []string) string {
	if len(list) == 0 {
		return "—"
	}
	var order []string
	n := map[string]int{}
	for _, s := range list {
		if n[s] == 0 {
			order = append(order, s)
		}
		n[s]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s ×%d", s, n[s])
	}
	return strings.Join(parts, ", ")
}
