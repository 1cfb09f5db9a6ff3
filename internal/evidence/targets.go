package evidence

import (
	"fmt"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/sink"
	"idemlab/internal/target"
)

// This file writes targets.json: each target as it was run, and per case
// its observations and the run's details, for the audit to judge.

// TargetsName is the targets' evidence file.
const TargetsName = "targets.json"

// A TargetResult is one target of a run: what it was, and its runs.
type TargetResult struct {
	Target *target.Target
	// TargetJSON is the target.json the lab ran it from, byte for byte.
	TargetJSON []byte
	Dir        string // relative to the checkout (slash path); "" outside it
	Digest     string
	Libraries  []target.Library
	Runtime    string
	Skipped    string // why it did not run (a program is missing); "" when it ran
	Runs       []TargetRun
}

// A TargetRun is one case on a target: its first trial (Obs, Detail) and
// the further ones, each on fresh state.
type TargetRun struct {
	Case    casefile.Case
	NotRun  string // why the case cannot run on the target; "" when it ran
	Obs     caserun.Observed
	Detail  caserun.TargetDetail
	Further []Trial // trials 2..N (runner -trials)
}

// A Trial is one further run of a case on a target.
type Trial struct {
	Obs    caserun.Observed
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
	Case   string `json:"case"`
	NotRun string `json:"not_run"`
	trialDoc
	Further []trialDoc `json:"further_trials,omitempty"` // absent: one trial
}

type trialDoc struct {
	Counter   *int64           `json:"counter"`
	ExitCodes []int            `json:"exit_codes"`
	Calls     []caserun.Call   `json:"calls"`
	Detail    *targetDetailDoc `json:"detail"`
}

type targetDetailDoc struct {
	WallMS    float64                `json:"wall_ms"`
	Processes []caserun.ServerDetail `json:"processes"`
	Calls     []caserun.CallDetail   `json:"calls"`
	Log       []string               `json:"log"`
	Journal   []sink.Entry           `json:"journal"`
	Exchanges []exchangeEntry        `json:"exchanges"`
	SinkCalls []sinkCallEntry        `json:"sink_calls"`
	KeyPrefix string                 `json:"key_prefix,omitempty"`     // an attached target's or a shared process's: every key of the run began with it
	Shared    *caserun.SharedProcess `json:"shared_process,omitempty"` // the process the run shared with other runs (caserun.Shareable)
}

// sinkCallEntry is what the sink did with one call of the target: the
// effect it applied (or replayed), and whether it took a fault armed for
// the call (the fault fired) and how it ended.
type sinkCallEntry struct {
	Replica int     `json:"replica"`
	Status  int     `json:"status"`
	Seq     int64   `json:"seq"`
	Replay  bool    `json:"replay"`
	Armed   bool    `json:"armed"`
	End     string  `json:"end"`
	Killed  bool    `json:"killed"`
	Err     string  `json:"error"`
	MS      float64 `json:"ms"`
}

type exchangeEntry struct {
	Fault     string  `json:"fault"`
	Status    int     `json:"status"`
	Dropped   bool    `json:"dropped"`
	Killed    bool    `json:"killed"`
	GaveUp    bool    `json:"gave_up"`
	SinkArmed bool    `json:"sink_armed"` // a fault was armed at the effect sink for it
	SinkFired bool    `json:"sink_fired"` // a call of the target to the sink took it
	Err       string  `json:"error"`
	MS        float64 `json:"ms"`
}

// TargetFiles renders targets.json.
func TargetFiles(ts []TargetResult) ([]File, error) {
	doc := targetsDoc{SchemaVersion: 1, Targets: []targetDoc{}}
	for _, t := range ts {
		d := targetDoc{Name: t.Target.Name, Dir: t.Dir, TargetJSON: string(t.TargetJSON), Digest: t.Digest,
			Libraries: orEmpty(t.Libraries), Runtime: t.Runtime, Skipped: t.Skipped, Runs: []targetRunDoc{}}
		for _, r := range t.Runs {
			d.Runs = append(d.Runs, runDocOf(r))
		}
		doc.Targets = append(doc.Targets, d)
	}
	data, err := Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode targets: %w", err)
	}
	return []File{{Name: TargetsName, Data: data, Schema: "targets.schema.json"}}, nil
}

func runDocOf(r TargetRun) targetRunDoc {
	d := targetRunDoc{Case: r.Case.Name, NotRun: r.NotRun, trialDoc: trialDoc{ExitCodes: []int{}, Calls: []caserun.Call{}}}
	if r.NotRun != "" {
		return d
	}
	d.trialDoc = trialDocOf(Trial{Obs: r.Obs, Detail: r.Detail})
	for _, t := range r.Further {
		d.Further = append(d.Further, trialDocOf(t))
	}
	return d
}

func trialDocOf(t Trial) trialDoc {
	counter := t.Obs.Counter
	d := trialDoc{Counter: &counter, ExitCodes: t.Obs.ExitCodes, Calls: t.Obs.Calls}
	det := &targetDetailDoc{WallMS: ms(t.Detail.Wall), Processes: orEmpty(t.Detail.Servers), Calls: orEmpty(t.Detail.Calls),
		Log: orEmpty(t.Detail.ServerLog), Journal: orEmpty(t.Detail.Journal), Exchanges: []exchangeEntry{}, SinkCalls: []sinkCallEntry{},
		KeyPrefix: t.Detail.KeyPrefix, Shared: t.Detail.Shared}
	for _, x := range t.Detail.Exchanges {
		det.Exchanges = append(det.Exchanges, exchangeEntry{Fault: x.Fault, Status: x.Status, Dropped: x.Dropped, Killed: x.Killed,
			GaveUp: x.GaveUp, SinkArmed: x.SinkArmed, SinkFired: x.SinkFired, Err: x.Err, MS: ms(x.End.Sub(x.Start))})
	}
	for _, c := range t.Detail.SinkCalls {
		end := ""
		if c.Action != (sink.Action{}) {
			end = c.Action.End.String()
		}
		det.SinkCalls = append(det.SinkCalls, sinkCallEntry{Replica: c.Replica, Status: c.Status, Seq: c.Seq, Replay: c.Replay,
			Armed: c.Armed, End: end, Killed: c.Killed, Err: c.Err, MS: ms(c.End.Sub(c.Start))})
	}
	d.Detail = det
	return d
}
