package evidence

import (
	"fmt"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
)

// A Run is one finished (case, store) run: what it observed, what varies.
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
	Case      string                 `json:"case"`
	Store     protocol.Store         `json:"store"`
	WallMS    float64                `json:"wall_ms"`
	Servers   []caserun.ServerDetail `json:"servers"`
	Calls     []caserun.CallDetail   `json:"calls"`
	ServerLog []string               `json:"server_log"`
}

// A Timing is when and how the case suite ran, for run.json.
type Timing struct {
	Began    time.Time
	Wall     time.Duration
	Parallel int // runs at once
}

// RunFiles renders the runs as results.json (observed) and run.json (varying).
func RunFiles(runs []Run, t Timing) ([]File, error) {
	res := resultsDoc{SchemaVersion: 1, Runs: []caserun.Observed{}}
	rd := runDoc{SchemaVersion: 1, StartedUTC: t.Began.UTC().Format(time.RFC3339Nano), WallMS: ms(t.Wall), Parallel: t.Parallel, Runs: []runDetail{}}
	for _, r := range runs {
		res.Runs = append(res.Runs, r.Obs)
		rd.Runs = append(rd.Runs, runDetail{Case: r.Case.Name, Store: r.Store, WallMS: ms(r.Detail.Wall),
			Servers: orEmpty(r.Detail.Servers), Calls: orEmpty(r.Detail.Calls), ServerLog: orEmpty(r.Detail.ServerLog)})
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

// orEmpty is s, or an empty slice for nil: the evidence writes [] for none.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
