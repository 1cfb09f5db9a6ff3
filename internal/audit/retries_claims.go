package audit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// checkRetriesParams checks retries.json's seed and parameters.
func (a *auditor) checkRetriesParams(doc, params map[string]any) {
	a.checkSeed(CheckExperiment, "", RetriesFile, "", doc["seed"])
	a.claim("params")
	for _, p := range retriesParams {
		a.check()
		got := render(params[p.name])
		want, src := a.expected(p.name, p.value)
		if got != fmt.Sprint(want) {
			a.experimentFail(RetriesFile, "parameters", p.name, fmt.Sprintf("%d (%s)", want, src), got)
		}
	}
}

// checkRetriesClaims checks the claims that compare a row with its
// parameters or another row: collisions and load shedding, layers, a key
// kept in a file, never-retry's drops, and the rows where nothing can
// fail. One that holds at the design's parameters only is checked while
// no recorded flag moves a knob it needs (retriesClaimApplies).
func (a *auditor) checkRetriesClaims(rows []any, params map[string]any) {
	r := soundRows{a: a, params: params, row: map[string]map[string]any{}}
	for _, x := range rows {
		m, _ := x.(map[string]any)
		c, _ := str(m, "client")
		if g, _ := str(m, "registry"); g == "sound" {
			r.row[c] = m
		}
	}
	r.checkCollisions()
	r.checkLayers()
	if r.has("restart-key-in-file") && a.retriesClaimApplies("restart-key-in-file lost 0", retryKnobs) {
		r.claim("restart-key-in-file", "lost", "0 (the key survives the restart)", r.n("restart-key-in-file", "lost") == 0)
	}
	if r.has("never-retry") {
		a.checkNeverRetry(r.row["never-retry"], params)
	}
	if r.p("drop_percent") == 0 && r.p("total_deadline_ms") == 0 && r.p("client_timeout_ms") > r.p("max_server_delay_ms")+noFailureMarginMS {
		a.checkNoFailure(rows)
	}
	if len(a.skippedClaims) > 0 {
		a.note(fmt.Sprintf("retries.json: %d of the design's claims hold at its parameters only, and manifest.flags moves a knob they depend on: not checked (%s)",
			len(a.skippedClaims), strings.Join(a.skippedClaims, "; ")))
	}
}

// soundRows are retries.json's rows on the sound registry, by client, and
// its parameters, for the claims that compare them.
type soundRows struct {
	a      *auditor
	row    map[string]map[string]any
	params map[string]any
}

func (r soundRows) p(name string) int64          { return number(r.params[name]) }
func (r soundRows) n(client, field string) int64 { return number(r.row[client][field]) }

func (r soundRows) has(clients ...string) bool {
	return !slices.ContainsFunc(clients, func(c string) bool { return r.row[c] == nil })
}

// claim checks that ok holds of client's field.
func (r soundRows) claim(client, field, expected string, ok bool) {
	r.a.check()
	if !ok {
		r.a.experimentFail(RetriesFile, "row "+client+"/sound", field, expected, fmt.Sprint(r.n(client, field)))
	}
}

// checkCollisions checks the claims about collisions (every collide_every-th
// intent reuses the key before it with its own body: at least that many
// lost to 422, refused once each unless retried) and load shedding.
func (r soundRows) checkCollisions() {
	collisions := r.p("intents") / max(r.p("collide_every"), 1)
	for _, c := range []string{"retry-4xx", "retry-retryable"} {
		if r.has(c) {
			r.claim(c, "lost", fmt.Sprintf(">= intents / collide_every = %d (the collisions)", collisions), r.n(c, "lost") >= collisions)
		}
	}
	if r.has("retry-retryable") {
		r.claim("retry-retryable", "refused", fmt.Sprintf("<= intents / collide_every = %d (a 4xx is not retried)", collisions),
			r.n("retry-retryable", "refused") <= collisions)
	}
	if r.has("retry-4xx", "retry-retryable") && r.a.retriesClaimApplies("retry-4xx refused > retry-retryable's", []string{"attempts"}) {
		r.claim("retry-4xx", "refused", fmt.Sprintf("> retry-retryable's refused (%d): it retries every 4xx", r.n("retry-retryable", "refused")),
			r.n("retry-4xx", "refused") > r.n("retry-retryable", "refused"))
	}
	if r.has("honour-retry-after", "ignore-retry-after") && r.a.retriesClaimApplies("honour-retry-after refused < ignore-retry-after's", []string{"workers", "intents", "attempts", "timeout-ms", "drop-percent", "deadline-ms"}) {
		r.claim("honour-retry-after", "refused", fmt.Sprintf("< ignore-retry-after's refused (%d)", r.n("ignore-retry-after", "refused")),
			r.n("honour-retry-after", "refused") < r.n("ignore-retry-after", "refused"))
	}
}

// checkLayers checks the claims about retries in layers: at most
// layer_attempts per layer, multiplied across layers.
func (r soundRows) checkLayers() {
	if r.has("retry-3-layers") {
		bound := r.p("intents")
		for range r.p("layers") {
			bound *= r.p("layer_attempts")
		}
		r.claim("retry-3-layers", "sent", fmt.Sprintf("<= intents × layer_attempts^layers = %d", bound), r.n("retry-3-layers", "sent") <= bound)
	}
	if r.has("retry-1-layer") {
		bound := r.p("intents") * r.p("layer_attempts")
		r.claim("retry-1-layer", "sent", fmt.Sprintf("<= intents × layer_attempts = %d", bound), r.n("retry-1-layer", "sent") <= bound)
	}
	if r.has("retry-3-layers", "retry-1-layer") && r.a.retriesClaimApplies("retry-3-layers sent > retry-1-layer's", failureKnobs) {
		r.claim("retry-3-layers", "sent", fmt.Sprintf("> retry-1-layer's sent (%d): retries multiply across layers", r.n("retry-1-layer", "sent")),
			r.n("retry-3-layers", "sent") > r.n("retry-1-layer", "sent"))
	}
}

// checkNoFailure checks, where no attempt can fail (no drop, no deadline,
// a timeout well above the delay), that no row duplicates and none loses
// but those that lose by design (the collisions, load shedding).
func (a *auditor) checkNoFailure(rows []any) {
	for _, r := range rows {
		m, _ := r.(map[string]any)
		c, _ := str(m, "client")
		a.check()
		if d := number(m["duplicated"]); d != 0 {
			a.experimentFail(RetriesFile, "row "+rowName(m), "duplicated", "0 (no drop, no deadline, a timeout well above the delay: no attempt fails, none is retried)", fmt.Sprint(d))
		}
		if slices.Contains([]string{"retry-4xx", "retry-retryable", "ignore-retry-after", "honour-retry-after"}, c) {
			continue // they lose by design: collisions, load shedding
		}
		a.check()
		if l := number(m["lost"]); l != 0 {
			a.experimentFail(RetriesFile, "row "+rowName(m), "lost", "0 (no drop, no deadline, a timeout well above the delay: nothing can be lost)", fmt.Sprint(l))
		}
	}
}

// noFailureMarginMS is how far above the longest server delay a client
// timeout must be for the audit to call a timeout impossible.
const noFailureMarginMS = 1000

// retriesClaimApplies reports whether no recorded flag moves a knob the
// claim needs; a claim skipped is named in a note.
func (a *auditor) retriesClaimApplies(claim string, needs []string) bool {
	flags := mapOf(a.manifest, "flags")
	var moved []string
	for _, k := range needs {
		if _, ok := flags[k]; ok {
			moved = append(moved, "-"+k)
		}
	}
	if len(moved) == 0 {
		return true
	}
	a.skippedClaims = append(a.skippedClaims, claim+" (moved: "+strings.Join(moved, " ")+")")
	return false
}

// checkNeverRetry re-derives never-retry's sent from the seed: an intent's
// one attempt is dropped when the first draw of its stream (a PCG seeded
// with the seed and row<<32 | intent, row 0) mod 100 is below
// drop_percent; the others are sent, the dropped ones lost.
func (a *auditor) checkNeverRetry(row map[string]any, params map[string]any) {
	seed, err := strconv.ParseUint(a.seedText(), 10, 64)
	intents, drop := number(params["intents"]), number(params["drop_percent"])
	if err != nil || intents < 1 || intents > 10000 {
		return // reported with the parameters
	}
	var dropped int64
	for i := range intents {
		if rand.NewPCG(seed, uint64(i)).Uint64()%100 < uint64(drop) {
			dropped++
		}
	}
	a.claim("retries_sent")
	a.check()
	if sent := number(row["sent"]); sent != intents-dropped {
		a.experimentFail(RetriesFile, "row never-retry/sound", "sent",
			fmt.Sprintf("%d (the intents whose one attempt seed %d does not drop: %d of %d dropped)", intents-dropped, seed, dropped, intents), fmt.Sprint(sent))
	}
	a.check()
	if lost := number(row["lost"]); lost < dropped {
		a.experimentFail(RetriesFile, "row never-retry/sound", "lost",
			fmt.Sprintf(">= %d (the intents seed %d drops before their one attempt)", dropped, seed), fmt.Sprint(lost))
	}
}
