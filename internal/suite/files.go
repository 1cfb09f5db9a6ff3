package suite

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"idemlab/internal/caseplan"
	"idemlab/internal/evidence"
	"idemlab/internal/idemkey"
	"idemlab/internal/labfault"
	"idemlab/internal/labrun"
	"idemlab/internal/observation"
)

// resultsDoc is results.json: observations only, byte-identical run to run.
type resultsDoc struct {
	SchemaVersion int               `json:"schema_version"`
	Runs          []observation.Run `json:"runs"`
}

// runDoc is run.json: everything that varies between runs.
type runDoc struct {
	SchemaVersion int         `json:"schema_version"`
	StartedUTC    string      `json:"started_utc"`
	WallMS        float64     `json:"wall_ms"`
	Parallel      int         `json:"parallel"`
	Runs          []runDetail `json:"runs"`
}

type runDetail struct {
	Case      string         `json:"case"`
	Store     string         `json:"store"`
	WallMS    float64        `json:"wall_ms"`
	Servers   []serverDetail `json:"servers"`
	Calls     []callDetail   `json:"calls"`
	ServerLog []string       `json:"server_log"`
}

type serverDetail struct {
	PID      int     `json:"pid"`
	Addr     string  `json:"addr"`
	ReadyMS  float64 `json:"ready_ms"`
	ExitCode int     `json:"exit_code"`
}

type callDetail struct {
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error"`
	Client    int     `json:"client"`
}

// renderFiles turns the results into the evidence files, each with the
// schema it must satisfy.
func renderFiles(o Options, g gitState, cases []caseplan.Case, results []result, wall time.Duration, began time.Time) ([]evidence.File, error) {
	res := resultsDoc{SchemaVersion: 1, Runs: []observation.Run{}}
	rd := runDoc{SchemaVersion: 1, StartedUTC: began.UTC().Format(time.RFC3339Nano), WallMS: ms(wall), Parallel: parallel, Runs: []runDetail{}}
	for _, r := range results {
		res.Runs = append(res.Runs, r.obs)
		d := runDetail{Case: r.c.Name, Store: r.store, WallMS: ms(r.det.Wall), Servers: []serverDetail{}, Calls: []callDetail{}, ServerLog: r.det.ServerLog}
		if d.ServerLog == nil {
			d.ServerLog = []string{}
		}
		for _, s := range r.det.Servers {
			d.Servers = append(d.Servers, serverDetail{PID: s.PID, Addr: s.Addr, ReadyMS: ms(s.ReadyIn), ExitCode: s.ExitCode})
		}
		for _, c := range r.det.Calls {
			d.Calls = append(d.Calls, callDetail{LatencyMS: ms(c.Latency), Error: c.Error, Client: c.Client})
		}
		rd.Runs = append(rd.Runs, d)
	}
	resultsJSON, err := evidence.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	runJSON, err := evidence.Marshal(rd)
	if err != nil {
		return nil, fmt.Errorf("encode run: %w", err)
	}
	return []evidence.File{
		{Name: "results.json", Data: resultsJSON, Schema: "results.schema.json"},
		{Name: "run.json", Data: runJSON, Schema: "run.schema.json"},
		{Name: "REPORT.md", Data: []byte(report(cases, o.Stores, results, g))},
	}, nil
}

// gitState is the checkout's commit and whether its sources were dirty,
// read once when the run starts.
type gitState struct {
	commit string
	dirty  bool
}

func manifest(o Options, g gitState, cases []caseplan.Case, experiments []string, p labrun.Protocol, server []byte) (evidence.Manifest, error) {
	sources, err := evidence.Sources(o.Root)
	if err != nil {
		return evidence.Manifest{}, err
	}
	sel := evidence.Selection{Cases: []string{}, Stores: []string{}, Experiments: experiments}
	if len(cases) > 0 {
		sel.Stores = o.Stores
	}
	if sel.Experiments == nil {
		sel.Experiments = []string{}
	}
	for _, c := range cases {
		sel.Cases = append(sel.Cases, c.Name)
	}
	return evidence.Manifest{
		SchemaVersion: 1,
		GeneratedUTC:  time.Now().UTC().Format("2006-01-02T15:04:05Z"),
		SourceCommit:  g.commit,
		SourceDirty:   g.dirty,
		GoVersion:     runtime.Version(),
		OSArch:        runtime.GOOS + "/" + runtime.GOARCH,
		ServerSHA256:  evidence.SHA256(server),
		Protocol: evidence.Protocol{
			KeyHeader:       idemkey.Header,
			ReplayedHeader:  labrun.ReplayedHeader,
			FaultHeader:     labfault.Header,
			KeyPattern:      keyPattern,
			DefaultBody:     caseplan.DefaultBody,
			Capacity:        p.Capacity,
			MaxBody:         p.MaxBody,
			WaitMS:          p.Wait.Milliseconds(),
			SlowMS:          labfault.SlowDelay.Milliseconds(),
			CrashExitCode:   labfault.ExitCode,
			ClientTimeoutMS: p.ClientTimeout.Milliseconds(),
		},
		Selection:      sel,
		UnsafeRegistry: o.Unsafe,
		Sources:        sources,
	}, nil
}

// report is REPORT.md, the table a person reads. It holds no times, so it
// changes only when the sources or the observations do.
func report(cases []caseplan.Case, stores []string, results []result, g gitState) string {
	var b strings.Builder
	state := "clean"
	if g.dirty {
		state = "dirty"
	}
	passed := 0
	for _, r := range results {
		if len(r.mismatches) == 0 {
			passed++
		}
	}
	fmt.Fprintf(&b, "# idemlab report\n\nSource commit `%s` (%s tree). %d runs (%d cases × %d stores): %d pass, %d fail by the runner's own check; `audit` re-checks every one from the bytes.\n\n", g.commit, state, len(results), len(cases), len(stores), passed, len(results)-passed)
	b.WriteString("| case |")
	for _, s := range stores {
		fmt.Fprintf(&b, " %s (counter, verdict) |", s)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(stores)) + "\n")
	for i, c := range cases {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for j := range stores {
			r := results[i*len(stores)+j]
			fmt.Fprintf(&b, " %d, %s |", r.obs.Counter, verdict(r))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| case | store | expected | observed | verdict |\n|---|---|---|---|---|\n")
	for _, r := range results {
		want := "(none)"
		if x, ok := r.c.Expect[r.store]; ok {
			want = fmt.Sprintf("counter %d, exits %v", x.Counter, x.ExitCodes)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | counter %d, exits %v | %s |\n", r.c.Name, r.store, want, r.obs.Counter, r.obs.ExitCodes, verdict(r))
	}
	for i, c := range cases {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", c.Name, c.Summary)
		for j, store := range stores {
			r := results[i*len(stores)+j]
			fmt.Fprintf(&b, "\n### %s: %s\n\n", store, verdict(r))
			for _, m := range r.mismatches {
				fmt.Fprintf(&b, "- %s\n", m)
			}
			if len(r.mismatches) > 0 {
				b.WriteString("\n")
			}
			b.WriteString("| call | step | key | fault | outcome | status | body | replayed |\n|---|---|---|---|---|---|---|---|\n")
			for k, call := range r.obs.Calls {
				fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", k, call.Step, cell(call.Key), cell(call.Fault), call.Outcome, cell(call.Status), cell(call.Body), cell(call.Replayed))
			}
		}
	}
	return b.String()
}

// cell renders an optional value for a Markdown table cell.
func cell[T any](p *T) string {
	if p == nil {
		return "—"
	}
	s := fmt.Sprint(*p)
	if _, ok := any(*p).(string); ok {
		s = "`" + strings.NewReplacer("\n", `\n`, "|", `\|`, "`", "'").Replace(s) + "`"
	}
	return s
}

// keyPattern is the bare-token syntax idemkey accepts, as the manifest records it.
const keyPattern = "[A-Za-z0-9_-]{1,64}"
