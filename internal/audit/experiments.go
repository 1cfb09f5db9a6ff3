package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"idemlab/internal/audit/stormmodel"
)

// The experiment files. Each is checked only when manifest.files lists it.
const (
	RetriesFile   = "retries.json"
	JitterFile    = "jitter.json"
	JitterSVGFile = "jitter.svg"
)

// retriesRow is one row the retries experiment must hold, with the counts
// the design promises for it: each zero or positive while no recorded flag
// moves a knob it needs (retriesClaimApplies).
type retriesRow struct {
	name   string // client/registry
	claims []rowClaim
}

type rowClaim struct {
	field    string
	positive bool
	needs    []string // knobs (runner flags) the claim holds for at their design values; nil: any
}

// The knobs the claims depend on: a retrying client loses nothing while
// its attempts can get through (not all dropped, enough of them, no total
// deadline); a duplicate needs an attempt that timed out after its effect
// and a retry (the design's 30 ms timeout against up to 60 ms of server
// delay, over 200 intents).
var (
	retryKnobs   = []string{"drop-percent", "attempts", "deadline-ms"}
	failureKnobs = []string{"drop-percent", "attempts", "deadline-ms", "timeout-ms", "intents"}
)

func zero(field string, needs ...string) rowClaim     { return rowClaim{field, false, needs} }
func positive(field string, needs ...string) rowClaim { return rowClaim{field, true, needs} }

// retriesRows are the design's rows, in order, and its headline claims:
// retry-same-key on the sound registry neither loses nor duplicates, on
// record-after-effect it duplicates; every client that keeps one key per
// intent duplicates nothing on the sound registry, a new key per attempt
// or a key lost in a restart duplicates some.
var retriesRows = []retriesRow{
	{"never-retry/sound", []rowClaim{zero("duplicated")}},
	{"retry-no-key/sound", []rowClaim{zero("lost", retryKnobs...), positive("duplicated", failureKnobs...)}},
	{"retry-same-key/sound", []rowClaim{zero("lost", retryKnobs...), zero("duplicated")}},
	{"retry-same-key/record-after-effect", []rowClaim{positive("duplicated", failureKnobs...)}},
	{"retry-4xx/sound", []rowClaim{zero("duplicated")}},
	{"retry-retryable/sound", []rowClaim{zero("duplicated")}},
	{"ignore-retry-after/sound", []rowClaim{zero("duplicated")}},
	{"honour-retry-after/sound", []rowClaim{zero("duplicated")}},
	{"retry-3-layers/sound", []rowClaim{zero("duplicated")}},
	{"retry-1-layer/sound", []rowClaim{zero("duplicated")}},
	{"retry-new-key/sound", []rowClaim{positive("duplicated", failureKnobs...)}},
	{"restart-key-in-memory/sound", []rowClaim{positive("duplicated", failureKnobs...)}},
	{"restart-key-in-file/sound", []rowClaim{zero("duplicated")}},
}

// retriesParams are the design's parameters of the retries experiment
// (the audit's own copy), unless manifest.flags records a knob.
var retriesParams = []param{
	{"intents", 200}, {"workers", 10}, {"drop_percent", 15}, {"client_timeout_ms", 30},
	{"max_server_delay_ms", 60}, {"max_attempts", 30}, {"backoff_base_ms", 5}, {"backoff_cap_ms", 100},
	{"total_deadline_ms", 0}, {"collide_every", 10}, {"shed_inflight", 4}, {"retry_after_s", 1}, {"layers", 3}, {"layer_attempts", 3},
}

// experimentFiles are each experiment's name and file, in the runner's order.
var experimentFiles = [][2]string{{"retries", RetriesFile}, {"jitter", JitterFile}, {"chaos", ChaosFile}}

// checkExperiments checks every experiment manifest.selection names.
func (a *auditor) checkExperiments() {
	selected := a.selected("experiments")
	var names []string
	for _, e := range experimentFiles {
		names = append(names, e[0])
		if !slices.Contains(selected, e[0]) {
			a.check()
			if a.isListed(e[1]) {
				a.fail(Failure{Check: CheckExperiment, Field: "selection.experiments",
					Message: fmt.Sprintf("manifest.json: selection.experiments: lists no %s, but manifest.files lists %s", e[0], e[1])})
			}
			continue
		}
		switch e[0] {
		case "retries":
			if doc := a.experimentDoc(RetriesFile, a.schemas.Retries); doc != nil {
				a.checkRetries(doc)
			}
		case "jitter":
			if doc := a.experimentDoc(JitterFile, a.schemas.Jitter); doc != nil {
				a.checkJitter(doc)
				a.claim("jitter")
			}
			a.emit(JitterSVGFile, jitterSVG(stormmodel.Default))
		case "chaos":
			a.checkChaos() // chaos.go
		}
		a.report.Experiments = append(a.report.Experiments, e[0])
	}
	a.check()
	want := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !slices.Contains(selected, n) })
	if !slices.Equal(selected, want) {
		a.failf(CheckExperiment, "manifest.json: selection.experiments: %s: want known experiments (%s), each once, in that order",
			render(toAny(selected)), strings.Join(names, ", "))
	}
	if len(a.selCases) > 0 && len(want) < len(names) {
		only := "none"
		if len(want) > 0 {
			only = strings.Join(want, ", ") + " only"
		}
		a.report.Subset = append(a.report.Subset, "experiments: "+only)
	}
}

// experimentDoc reads an experiment's file for the last time, schema-valid,
// and releases its bytes; nil, with a note, when it is missing or invalid.
func (a *auditor) experimentDoc(file string, schema *jsonschema.Schema) map[string]any {
	doc, _ := a.jsonDoc(file, schema).(map[string]any)
	a.release(file)
	if doc == nil {
		a.note(file + " is missing or invalid: its checks were not made")
	}
	return doc
}

// experimentFail records one failed experiment check.
func (a *auditor) experimentFail(file, where, field, expected, observed string) {
	a.fail(Failure{Check: CheckExperiment, Field: field, Expected: expected, Observed: observed,
		Message: fmt.Sprintf("%s: %s: %s: expected %s, observed %s", file, where, field, expected, observed)})
}

// checkRetries checks a schema-valid retries.json: the parameters, the
// design's rows in order, each row's counts adding up, and the claims.
func (a *auditor) checkRetries(doc map[string]any) {
	params, _ := doc["parameters"].(map[string]any)
	a.checkRetriesParams(doc, params) // retries_claims.go: the design's, or the knobs manifest.flags records
	intents := number(params["intents"])
	rows, _ := doc["rows"].([]any)
	a.check()
	var names, want []string
	for _, r := range rows {
		names = append(names, rowName(r))
	}
	for _, w := range retriesRows {
		want = append(want, w.name)
	}
	if !slices.Equal(names, want) {
		a.failf(CheckExperiment, "%s: rows: expected the design's %d rows in its order, observed %d: %s",
			RetriesFile, len(want), len(names), firstDiffOf("rows", want, names))
	}
	for _, w := range retriesRows {
		where := "row " + w.name
		j := slices.Index(names, w.name)
		if j < 0 {
			continue // reported above
		}
		row, _ := rows[j].(map[string]any)
		lost, once, dup := number(row["lost"]), number(row["applied_once"]), number(row["duplicated"])
		a.check()
		if sum := lost + once + dup; sum != intents {
			a.experimentFail(RetriesFile, where, "lost+applied_once+duplicated",
				fmt.Sprintf("%d (parameters.intents)", intents), fmt.Sprint(sum))
		}
		// Every applied intent was sent at least once, a duplicated one
		// twice; a refusal is a reply to a sent attempt.
		sent, refused := number(row["sent"]), number(row["refused"])
		a.check()
		if sent < once+2*dup {
			a.experimentFail(RetriesFile, where, "sent", fmt.Sprintf(">= applied_once + 2 × duplicated = %d", once+2*dup), fmt.Sprint(sent))
		}
		if refused > sent {
			a.experimentFail(RetriesFile, where, "refused", fmt.Sprintf("<= sent (%d)", sent), fmt.Sprint(refused))
		}
		for _, c := range w.claims {
			if !a.retriesClaimApplies(w.name+" "+c.field, c.needs) {
				continue
			}
			a.check()
			switch n := number(row[c.field]); {
			case c.positive && n <= 0:
				a.experimentFail(RetriesFile, where, c.field, "> 0", fmt.Sprint(n))
			case !c.positive && n != 0:
				a.experimentFail(RetriesFile, where, c.field, "0", fmt.Sprint(n))
			}
		}
	}
	a.checkRetriesClaims(rows, params) // retries_claims.go
	a.claim("retries")
}

// rowName names a row of retries.json: client/registry.
func rowName(row any) string {
	m, _ := row.(map[string]any)
	c, _ := str(m, "client")
	g, _ := str(m, "registry")
	return c + "/" + g
}

// number returns a decoded JSON integer, 0 for anything else.
func number(v any) int64 {
	n, _ := v.(json.Number)
	i, _ := n.Int64()
	return i
}

// checkJitter compares jitter.json with the model (stormmodel).
func (a *auditor) checkJitter(doc map[string]any) {
	params, _ := doc["parameters"].(map[string]any)
	d := stormmodel.Default
	for _, p := range []param{{"seed", int64(d.Seed)}, {"clients", int64(d.Clients)}, {"retries", int64(d.Retries)},
		{"base_ms", int64(d.BaseMS)}, {"cap_ms", int64(d.CapMS)}, {"bucket_ms", int64(d.BucketMS)}} {
		a.check()
		if got := number(params[p.name]); got != p.value {
			a.experimentFail(JitterFile, "parameters", p.name, fmt.Sprint(p.value), fmt.Sprint(got))
		}
	}
	want, _ := stormmodel.Run(d)
	got, _ := doc["strategies"].([]any)
	for i, w := range want {
		a.check()
		if i >= len(got) {
			a.failf(CheckExperiment, "%s: strategy %s: missing", JitterFile, w.Name)
			continue
		}
		s, _ := got[i].(map[string]any)
		where := "strategy " + w.Name
		if name, _ := str(s, "name"); name != w.Name {
			a.experimentFail(JitterFile, fmt.Sprintf("strategies[%d]", i), "name", fmt.Sprintf("%q", w.Name), fmt.Sprintf("%q", name))
			continue
		}
		for _, p := range []param{{"peak", int64(w.Peak)}, {"total", int64(w.Total)}} {
			a.check()
			if got := number(s[p.name]); got != p.value {
				a.experimentFail(JitterFile, where, p.name, fmt.Sprint(p.value), fmt.Sprint(got))
			}
		}
		a.check()
		buckets, _ := s["buckets"].([]any)
		if len(buckets) != len(w.Buckets) {
			a.experimentFail(JitterFile, where, "buckets", fmt.Sprintf("%d buckets", len(w.Buckets)), fmt.Sprintf("%d", len(buckets)))
			continue
		}
		for b, c := range w.Buckets {
			if n := number(buckets[b]); n != int64(c) {
				a.experimentFail(JitterFile, where, fmt.Sprintf("buckets[%d]", b), fmt.Sprint(c), fmt.Sprint(n))
				break // one line per strategy: the first bucket that differs
			}
		}
	}
	if len(got) > len(want) {
		a.failf(CheckExperiment, "%s: strategies: expected %d, observed %d", JitterFile, len(want), len(got))
	}
}

// firstDiff describes where got first differs from want, by line.
func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	n := max(len(wl), len(gl)) // the shorter side padded with empty lines
	wl, gl = append(wl, make([][]byte, n-len(wl))...), append(gl, make([][]byte, n-len(gl))...)
	for i := range n {
		if !bytes.Equal(wl[i], gl[i]) {
			return fmt.Sprintf("line %d: expected %q, observed %q", i+1, clip(wl[i]), clip(gl[i]))
		}
	}
	return "same lines, different bytes"
}

// clip shortens a line for a failure message.
func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}

// jitterSVG draws the model run with p, in integer arithmetic only.
func jitterSVG(p stormmodel.Parameters) []byte {
	const (
		width, header, panelHeight, footer = 960, 56, 230, 10
		left                               = 80
	)
	model, _ := stormmodel.Run(p)
	height := header + panelHeight*len(model) + footer
	var b strings.Builder
	put(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, width, height, width, height)
	put(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, width, height)
	put(&b, `<text x="%d" y="24" font-size="17" font-weight="bold">Retries per %d ms: %d clients fail at t = 0, each retries %d times</text>`,
		left, p.BucketMS, p.Clients, p.Retries)
	put(&b, `<text x="%d" y="44" fill="#555555">base %d ms, cap %d ms, mulberry32 seed %d; each panel has its own scale</text>`,
		left, p.BaseMS, p.CapMS, p.Seed)
	for i, s := range model {
		drawPanel(&b, s, p.BucketMS, header+i*panelHeight)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// drawPanel draws one strategy's histogram with its top edge at y0.
func drawPanel(b *strings.Builder, s stormmodel.Strategy, bucket, y0 int) {
	const (
		width, left, right = 960, 80, 30
		plotTop, plotH     = 34, 150
		ticksY, ticksX     = 5, 10
	)
	w := width - left - right
	top, bottom := y0+plotTop, y0+plotTop+plotH
	put(b, `<g id="%s">`, s.Name)
	put(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s: peak %d retries in one %d ms bucket (%d retries in all)</text>`,
		left, y0+20, s.Name, s.Peak, bucket, s.Total)
	n := max(len(s.Buckets), 1)
	yTop, yStep := axis(max(s.Peak, 1), ticksY)
	xTopMS, xStep := axis(n*bucket, ticksX)
	span := max(xTopMS/bucket, n)
	for v := 0; v <= yTop; v += yStep {
		y := bottom - v*plotH/yTop
		put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`, left, y, left+w, y)
		put(b, `<text x="%d" y="%d" text-anchor="end">%d</text>`, left-6, y+4, v)
	}
	// Each pixel column shows the largest bucket it covers; equal
	// neighbouring columns merge into one bar.
	col := make([]int, w)
	for i, c := range s.Buckets {
		from := i * w / span
		to := max((i+1)*w/span, from+1)
		for x := from; x < to && x < w; x++ {
			col[x] = max(col[x], c)
		}
	}
	put(b, `<g fill="#3366aa">`)
	for x := 0; x < w; {
		end := x + 1
		for end < w && col[end] == col[x] {
			end++
		}
		if c := col[x]; c > 0 {
			h := max((c*plotH+yTop/2)/yTop, 1)
			put(b, `<rect x="%d" y="%d" width="%d" height="%d"/>`, left+x, bottom-h, end-x, h)
		}
		x = end
	}
	put(b, `</g>`)
	put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, left, bottom, left+w, bottom)
	put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, left, top, left, bottom)
	for t := 0; t <= span*bucket; t += xStep {
		x := left + t*w/(span*bucket)
		put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, x, bottom, x, bottom+5)
		put(b, `<text x="%d" y="%d" text-anchor="middle">%d</text>`, x, bottom+18, t)
	}
	put(b, `<text x="%d" y="%d" text-anchor="middle">time since the failure (ms)</text>`, left+w/2, bottom+36)
	mid := (top + bottom) / 2
	put(b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">retries per %d ms</text>`, left-50, mid, left-50, mid, bucket)
	put(b, `</g>`)
}

// axis returns the smallest axis top ≥ v whose step, 1, 2 or 5 times a
// power of ten, divides it into at most ticks steps (jitter.svg's axes and
// the chaos timelines').
func axis[T int | int64](v, ticks T) (top, step T) {
	for mag := T(1); ; mag *= 10 {
		for _, m := range []T{1, 2, 5} {
			step = m * mag
			if k := (v + step - 1) / step; k <= ticks {
				return k * step, step
			}
		}
	}
}
