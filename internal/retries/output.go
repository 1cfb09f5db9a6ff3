package retries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// JSON encodes r as retries.json, fields in a fixed order, rows in run order.
func (r Result) JSON() []byte {
	if r.Rows == nil {
		r.Rows = []RowResult{}
	}
	doc := struct {
		SchemaVersion int `json:"schema_version"`
		Result
	}{1, r}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		panic(fmt.Sprintf("retries: encode result: %v", err)) // plain ints and strings cannot fail
	}
	return b.Bytes()
}

// WriteText prints r as a table a person reads: one line per row.
func (r Result) WriteText(w io.Writer) error {
	p := r.Parameters
	deadline := "no total deadline"
	if p.TotalDeadlineMS > 0 {
		deadline = fmt.Sprintf("total deadline %d ms", p.TotalDeadlineMS)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "retries: %d intents per row, seed %d; %d workers, %d%% dropped before sending, timeout %d ms, server delay 0-%d ms, up to %d attempts, %s\n",
		p.Intents, r.Seed, p.Workers, p.DropPercent, p.ClientTimeoutMS, p.MaxServerDelayMS, p.MaxAttempts, deadline)
	cw, rw := len("client"), len("registry")
	for _, row := range r.Rows {
		cw, rw = max(cw, len(row.Client)), max(rw, len(row.Registry))
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %4s  %12s  %10s  %5s  %7s\n", cw, "client", rw, "registry", "lost", "applied once", "duplicated", "sent", "refused")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-*s  %-*s  %4d  %12d  %10d  %5d  %7d\n", cw, row.Client, rw, row.Registry, row.Lost, row.AppliedOnce, row.Duplicated, row.Sent, row.Refused)
	}
	_, err := w.Write(b.Bytes())
	return err
}
