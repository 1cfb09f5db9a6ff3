package audit

import (
	"fmt"
	"slices"
)

// The retries experiment's parameters. The runner's flags set intents,
// workers, drop_percent, client_timeout_ms, max_attempts and
// total_deadline_ms (each within its range); the others are the design's
// constants and must equal them.
var retriesFlagRanges = map[string][2]int64{
	"intents":           {1, 1 << 20},
	"workers":           {1, 10_000},
	"drop_percent":      {0, 100},
	"client_timeout_ms": {1, 600_000},
	"max_attempts":      {1, 1_000},
	"total_deadline_ms": {0, 3_600_000},
}

// checkRetriesParams checks retries.json's parameters: the flags within
// their ranges, every other parameter equal to the design's.
func (a *auditor) checkRetriesParams(params map[string]any) {
	for _, p := range retriesParams {
		a.check()
		got := render(params[p.name])
		if r, flag := retriesFlagRanges[p.name]; flag {
			if n := number(params[p.name]); got != fmt.Sprint(n) || n < r[0] || n > r[1] {
				a.experimentFail(RetriesFile, "parameters", p.name, fmt.Sprintf("%d..%d (runner -flag)", r[0], r[1]), got)
			}
			continue
		}
		if got != fmt.Sprint(p.value) {
			a.experimentFail(RetriesFile, "parameters", p.name, fmt.Sprint(p.value)+" (the design's)", got)
		}
	}
}

// checkRetriesClaims checks the client-side lessons' claims, which compare
// a row with its parameters or with another row (the per-row zero and
// positive counts are in retriesRows):
//
//   - retry-4xx and retry-retryable: every collide_every-th intent takes
//     the key of the one before with its own body, so at least
//     intents/collide_every are lost (422); retry-retryable does not retry
//     a 4xx, so it is refused at most once per collision, and retry-4xx,
//     which retries them, more often;
//   - honour-retry-after is refused less often than ignore-retry-after;
//   - retry-3-layers sends more than retry-1-layer, at most
//     layer_attempts^layers per intent, retry-1-layer at most
//     layer_attempts per intent;
//   - restart-key-in-file loses nothing (the key survives the restart).
func (a *auditor) checkRetriesClaims(rows []any, params map[string]any) {
	row := map[string]map[string]any{}
	for _, r := range rows {
		m, _ := r.(map[string]any)
		c, _ := str(m, "client")
		g, _ := str(m, "registry")
		if g == "sound" {
			row[c] = m
		}
	}
	p := func(name string) int64 { return number(params[name]) }
	n := func(client, field string) int64 { return number(row[client][field]) }
	has := func(clients ...string) bool {
		return !slices.ContainsFunc(clients, func(c string) bool { return row[c] == nil })
	}
	claim := func(client, field, expected string, ok bool, observed int64) {
		a.check()
		if !ok {
			a.experimentFail(RetriesFile, "row "+client+"/sound", field, expected, fmt.Sprint(observed))
		}
	}
	collisions := p("intents") / max(p("collide_every"), 1)
	for _, c := range []string{"retry-4xx", "retry-retryable"} {
		if has(c) {
			claim(c, "lost", fmt.Sprintf(">= intents / collide_every = %d (the collisions)", collisions), n(c, "lost") >= collisions, n(c, "lost"))
		}
	}
	if has("retry-retryable") {
		claim("retry-retryable", "refused", fmt.Sprintf("<= intents / collide_every = %d (a 4xx is not retried)", collisions),
			n("retry-retryable", "refused") <= collisions, n("retry-retryable", "refused"))
	}
	if has("retry-4xx", "retry-retryable") {
		claim("retry-4xx", "refused", fmt.Sprintf("> retry-retryable's refused (%d): it retries every 4xx", n("retry-retryable", "refused")),
			n("retry-4xx", "refused") > n("retry-retryable", "refused"), n("retry-4xx", "refused"))
	}
	if has("honour-retry-after", "ignore-retry-after") {
		claim("honour-retry-after", "refused", fmt.Sprintf("< ignore-retry-after's refused (%d)", n("ignore-retry-after", "refused")),
			n("honour-retry-after", "refused") < n("ignore-retry-after", "refused"), n("honour-retry-after", "refused"))
	}
	if has("retry-3-layers") {
		bound := p("intents")
		for range p("layers") {
			bound *= p("layer_attempts")
		}
		claim("retry-3-layers", "sent", fmt.Sprintf("<= intents × layer_attempts^layers = %d", bound), n("retry-3-layers", "sent") <= bound, n("retry-3-layers", "sent"))
	}
	if has("retry-1-layer") {
		bound := p("intents") * p("layer_attempts")
		claim("retry-1-layer", "sent", fmt.Sprintf("<= intents × layer_attempts = %d", bound), n("retry-1-layer", "sent") <= bound, n("retry-1-layer", "sent"))
	}
	if has("retry-3-layers", "retry-1-layer") {
		claim("retry-3-layers", "sent", fmt.Sprintf("> retry-1-layer's sent (%d): retries multiply across layers", n("retry-1-layer", "sent")),
			n("retry-3-layers", "sent") > n("retry-1-layer", "sent"), n("retry-3-layers", "sent"))
	}
	if has("restart-key-in-file") {
		claim("restart-key-in-file", "lost", "0 (the key survives the restart)", n("restart-key-in-file", "lost") == 0, n("restart-key-in-file", "lost"))
	}
}
