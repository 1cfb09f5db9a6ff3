package evidence

import (
	"fmt"
	"slices"
	"strings"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/results"
	"idemlab/internal/sink"
	"idemlab/internal/target"
	"idemlab/internal/verdict"
)

// This file renders the runs on targets, services the lab did not write:
// targets.json (each target as it was run, and per case its observations,
// its verdict and the run's details) and TARGETS.md, the tables a person
// reads, which holds only what the audit re-derives from targets.json and
// the case files.

// Names of the targets' evidence files.
const (
	TargetsName       = "targets.json"
	TargetsReportName = "TARGETS.md"
)

// A TargetResult is one target of a run: what it was, and its runs.
type TargetResult struct {
	Target *target.Target
	// TargetJSON is the target.json the lab ran it from, byte for byte.
	TargetJSON []byte
	// Dir is the target's folder relative to the checkout (slash path),
	// or "" for a folder outside it.
	Dir       string
	Digest    string
	Libraries []target.Library
	Runtime   string
	Skipped   string // why it did not run (a program is missing); "" when it ran
	Runs      []TargetRun
}

// A TargetRun is one case on a target.
type TargetRun struct {
	Case    casefile.Case
	NotRun  string // why the case cannot run on the target; "" when it ran
	Obs     results.Run
	Verdict verdict.Verdict
	// Mirror lists the differences from the native run of the store the
	// target mirrors (the lab's own server as a target); nil otherwise.
	Mirror []string
	Detail caserun.TargetDetail
}

type targetsDoc struct {
	SchemaVersion int         `json:"schema_version"`
	Targets       []targetDoc `json:"targets"`
}

type targetDoc struct {
	Name       string           `json:"name"`
	Dir        string           `json:"dir"`
	TargetJSON string           `json:"target_json"`
	Digest     string           `json:"digest"`
	Libraries  []target.Library `json:"libraries"`
	Runtime    string           `json:"runtime"`
	Skipped    string           `json:"skipped"`
	Runs       []targetRunDoc   `json:"runs"`
}

type targetRunDoc struct {
	Case      string           `json:"case"`
	NotRun    string           `json:"not_run"`
	Counter   *int64           `json:"counter"`
	ExitCodes []int            `json:"exit_codes"`
	Calls     []results.Call   `json:"calls"`
	Verdict   *verdict.Verdict `json:"verdict"`
	Mirror    []string         `json:"mirror"`
	Detail    *targetDetailDoc `json:"detail"`
}

type targetDetailDoc struct {
	WallMS    float64         `json:"wall_ms"`
	Processes []serverDetail  `json:"processes"`
	Calls     []callDetail    `json:"calls"`
	Log       []string        `json:"log"`
	Journal   []sink.Entry    `json:"journal"`
	Exchanges []exchangeEntry `json:"exchanges"`
}

type exchangeEntry struct {
	Fault   string  `json:"fault"`
	Status  int     `json:"status"`
	Dropped bool    `json:"dropped"`
	Killed  bool    `json:"killed"`
	GaveUp  bool    `json:"gave_up"`
	Err     string  `json:"error"`
	MS      float64 `json:"ms"`
}

// TargetFiles renders targets.json and TARGETS.md.
func TargetFiles(ts []TargetResult) ([]File, error) {
	doc := targetsDoc{SchemaVersion: 1, Targets: []targetDoc{}}
	for _, t := range ts {
		d := targetDoc{Name: t.Target.Name, Dir: t.Dir, TargetJSON: string(t.TargetJSON), Digest: t.Digest,
			Libraries: t.Libraries, Runtime: t.Runtime, Skipped: t.Skipped, Runs: []targetRunDoc{}}
		if d.Libraries == nil {
			d.Libraries = []target.Library{}
		}
		for _, r := range t.Runs {
			d.Runs = append(d.Runs, runDocOf(r))
		}
		doc.Targets = append(doc.Targets, d)
	}
	data, err := Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode targets: %w", err)
	}
	return []File{
		{Name: TargetsName, Data: data, Schema: "targets.schema.json"},
		{Name: TargetsReportName, Data: TargetsReport(ts)},
	}, nil
}

func runDocOf(r TargetRun) targetRunDoc {
	d := targetRunDoc{Case: r.Case.Name, NotRun: r.NotRun, ExitCodes: []int{}, Calls: []results.Call{}, Mirror: r.Mirror}
	if r.NotRun != "" {
		return d
	}
	counter := r.Obs.Counter
	v := r.Verdict
	d.Counter, d.ExitCodes, d.Calls, d.Verdict = &counter, r.Obs.ExitCodes, r.Obs.Calls, &v
	det := &targetDetailDoc{WallMS: ms(r.Detail.Wall), Processes: []serverDetail{}, Calls: []callDetail{},
		Log: r.Detail.ServerLog, Journal: r.Detail.Journal, Exchanges: []exchangeEntry{}}
	if det.Log == nil {
		det.Log = []string{}
	}
	if det.Journal == nil {
		det.Journal = []sink.Entry{}
	}
	for _, s := range r.Detail.Servers {
		det.Processes = append(det.Processes, serverDetail{PID: s.PID, Addr: s.Addr, ReadyMS: ms(s.ReadyIn), ExitCode: s.ExitCode})
	}
	for _, c := range r.Detail.Calls {
		det.Calls = append(det.Calls, callDetail{LatencyMS: ms(c.Latency), Error: c.Error, Client: c.Client})
	}
	for _, x := range r.Detail.Exchanges {
		det.Exchanges = append(det.Exchanges, exchangeEntry{Fault: x.Fault, Status: x.Status, Dropped: x.Dropped, Killed: x.Killed,
			GaveUp: x.GaveUp, Err: x.Err, MS: ms(x.End.Sub(x.Start))})
	}
	d.Detail = det
	return d
}

// targetsLegend says what a row of TARGETS.md means.
const targetsLegend = `Each target is a service the lab did not write, run between the lab's
fault proxy and its effect sink (docs/targets.md). A row judges one case:
**effects** is what the target applied (the sink's journal, or the target's
own count) beside what a sound implementation applies; **safety** is *pass*,
*limitation* (every finding is explained by what the target claims, such as
keeping its keys in memory) or *violation*; **conformance** lists the
deviations from the IETF Idempotency-Key draft, which are never safety
failures. A case the target cannot express is *not run*, with the reason.
`

// TargetsReport is TARGETS.md.
func TargetsReport(ts []TargetResult) []byte {
	var b strings.Builder
	b.WriteString("# idemlab targets\n\n")
	b.WriteString(targetsLegend)
	for _, t := range ts {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", t.Target.Name, t.Target.Summary)
		if t.Skipped != "" {
			fmt.Fprintf(&b, "Not run here: %s.\n", t.Skipped)
			continue
		}
		fmt.Fprintf(&b, "- code under test: %s\n", libraries(t))
		fmt.Fprintf(&b, "- claims: %s\n", claims(t.Target.Claims))
		if r := t.Target.Replay; r != nil {
			fmt.Fprintf(&b, "- replay marker: `%s: %s`\n", r.Header, r.Value)
		} else {
			b.WriteString("- replay marker: none\n")
		}
		if t.Target.Mirrors != "" {
			fmt.Fprintf(&b, "- mirrors the native %s store: %s\n", t.Target.Mirrors, mirrored(t.Runs))
		}
		b.WriteString("\n| case | effects (sound) | safety | conformance | findings |\n|---|---|---|---|---|\n")
		for _, r := range t.Runs {
			if r.NotRun != "" {
				fmt.Fprintf(&b, "| %s | — | not run | — | %s |\n", r.Case.Name, escape(r.NotRun))
				continue
			}
			fmt.Fprintf(&b, "| %s | %d (%d) | %s | %s | %s |\n", r.Case.Name, r.Verdict.Effects, r.Verdict.SoundEffects,
				r.Verdict.Safety, rules(r.Verdict.Deviations), escape(findings(r.Verdict.Findings)))
		}
		for _, r := range t.Runs {
			if r.NotRun != "" {
				continue
			}
			fmt.Fprintf(&b, "\n### %s on %s: %s, %s\n\n", r.Case.Name, t.Target.Name, effectsApplied(r.Verdict.Effects), r.Verdict.Safety)
			notes := 0
			for _, f := range r.Verdict.Findings {
				fmt.Fprintf(&b, "- safety %s%s: %s%s\n", f.Rule, at(f.Call), escape(f.Detail), limitation(f))
				notes++
			}
			for _, f := range r.Verdict.Deviations {
				fmt.Fprintf(&b, "- conformance %s%s: %s\n", f.Rule, at(f.Call), escape(f.Detail))
				notes++
			}
			for _, m := range r.Mirror {
				fmt.Fprintf(&b, "- differs from the native run: %s\n", escape(m))
				notes++
			}
			if notes > 0 {
				b.WriteString("\n")
			}
			b.WriteString("| call | step | key | fault | outcome | status | body | replayed |\n|---|---|---|---|---|---|---|---|\n")
			for k, call := range r.Obs.Calls {
				fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", k, call.Step, cell(call.Key), cell(call.Fault), call.Outcome, cell(call.Status), cell(call.Body), cell(call.Replayed))
			}
		}
	}
	return []byte(b.String())
}

// effectsApplied says "1 effect applied" or "N effects applied".
func effectsApplied(n int64) string {
	if n == 1 {
		return "1 effect applied"
	}
	return fmt.Sprintf("%d effects applied", n)
}

func libraries(t TargetResult) string {
	var parts []string
	for _, l := range t.Libraries {
		parts = append(parts, l.Name+" "+l.Version)
	}
	if t.Runtime != "" {
		parts = append(parts, "on "+t.Runtime)
	}
	if len(parts) == 0 {
		return "(not recorded)"
	}
	return strings.Join(parts, ", ")
}

func claims(c target.Claims) string {
	var parts []string
	if c.Durable {
		parts = append(parts, "durable")
	} else {
		parts = append(parts, "not durable")
	}
	if c.SharedStore {
		parts = append(parts, "a shared store")
	} else {
		parts = append(parts, "no shared store")
	}
	if c.Capacity != nil {
		parts = append(parts, fmt.Sprintf("capacity %d", *c.Capacity))
	} else {
		parts = append(parts, "no capacity")
	}
	if c.MaxBody != nil {
		parts = append(parts, fmt.Sprintf("max body %d bytes", *c.MaxBody))
	} else {
		parts = append(parts, "no body limit")
	}
	return strings.Join(parts, ", ")
}

// mirrored says whether every run reproduced the native one.
func mirrored(runs []TargetRun) string {
	ran, differ := 0, 0
	for _, r := range runs {
		if r.NotRun != "" {
			continue
		}
		ran++
		if len(r.Mirror) > 0 {
			differ++
		}
	}
	if differ == 0 {
		return fmt.Sprintf("all %d runs identical", ran)
	}
	return fmt.Sprintf("%d of %d runs DIFFER", differ, ran)
}

// rules lists the distinct rules of some findings, in order of first
// appearance (deviations of two rules may alternate call by call).
func rules(fs []verdict.Finding) string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, ", ")
}

// findings is the safety findings of a run on one line.
func findings(fs []verdict.Finding) string {
	var out []string
	for _, f := range fs {
		s := f.Rule + ": " + f.Detail
		if f.Limitation != "" {
			s += " (limitation)"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, "; ")
}

func at(call *int) string {
	if call == nil {
		return ""
	}
	return fmt.Sprintf(" (call %d)", *call)
}

func limitation(f verdict.Finding) string {
	if f.Limitation == "" {
		return ""
	}
	return " — a limitation: " + f.Limitation
}

// escape makes s safe inside a Markdown table cell.
func escape(s string) string { return strings.NewReplacer("\n", " ", "|", `\|`).Replace(s) }
