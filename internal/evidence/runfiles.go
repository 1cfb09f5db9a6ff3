package evidence

import (
	"fmt"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
)

// A Run is one finished (case, store) run: what it observed, and what
// varies (its details).
type Run struct {
	Case   casefile.Case
	Store  protocol.Store
	Obs    caserun.Observed
	Detail caserun.Detail
}

// resultsDoc is results.json: observations only, byte-identical run to run.
type resultsDoc struct {
	SchemaVersion int                `json:"schema_version"`
	Runs          []caserun.Observed `json:"runs"`
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
	Store     protocol.Store `json:"store"`
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

// A Timing is when and how the case suite ran, for run.json.
type Timing struct {
	Began    time.Time
	Wall     time.Duration
	Parallel int // runs at once
}

// RunFiles renders the runs, cases in suite order and stores in evidence
// order, as results.json (what was observed) and run.json (what varies),
// each with the schema it must satisfy.
func RunFiles(runs []Run, t Timing) ([]File, error) {
	res := resultsDoc{SchemaVersion: 1, Runs: []caserun.Observed{}}
	rd := runDoc{SchemaVersion: 1, StartedUTC: t.Began.UTC().Format(time.RFC3339Nano), WallMS: ms(t.Wall), Parallel: t.Parallel, Runs: []runDetail{}}
	for _, r := range runs {
		res.Runs = append(res.Runs, r.Obs)
		d := runDetail{Case: r.Case.Name, Store: r.Store, WallMS: ms(r.Detail.Wall), Servers: []serverDetail{}, Calls: []callDetail{}, ServerLog: r.Detail.ServerLog}
		if d.ServerLog == nil {
			d.ServerLog = []string{}
		}
		for _, s := range r.Detail.Servers {
			d.Servers = append(d.Servers, serverDetail{PID: s.PID, Addr: s.Addr, ReadyMS: ms(s.ReadyIn), ExitCode: s.ExitCode})
		}
		for _, c := range r.Detail.Calls {
			d.Calls = append(d.Calls, callDetail{LatencyMS: ms(c.Latency), Error: c.Error, Client: c.Client})
		}
		rd.Runs = append(rd.Runs, d)
	}
	resultsJSON, err := Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	runJSON, err := Marshal(rd)
	if err != nil {
		return nil, fmt.Errorf("encode run: %w", err)
	}
	return []File{
		{Name: ResultsName, Data: resultsJSON, Schema: "results.schema.json"},
		{Name: RunName, Data: runJSON, Schema: "run.schema.json"},
	}, nil
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
