package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SVG draws h as a timeline a person reads without the JSON: one lane per
// replica (each process's life, the nemesis's kills, the faults' kills,
// the planned kills skipped), one lane per client (each attempt a bar
// from its start to its end, coloured by its outcome, a cap where it
// carried a fault), the sink's lane where the journal says when each
// effect was applied (a tick per effect), the phases, and the findings:
// every attempt of an intent with a finding outlined (red: a violation,
// magenta: shown, not promised), the first ones numbered above the lanes
// and listed below with what the history says of them.
//
// It is a pure function of h and the check of h, in integer arithmetic
// (no float is formatted), so the audit draws the same bytes from the
// history file with its own code. The layout is documented by the code
// itself: the audit's renderer is written from this description and
// compared byte for byte.
func SVG(h History) []byte {
	c := CheckHistory(h)
	var b strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}

	// The findings drawn: one per (rule, intent) of an intent, violations
	// first, then by rule order, then intent.
	type marked struct {
		rule     Rule
		intent   int
		key      string
		promised bool
	}
	order := map[Rule]int{}
	for i, r := range Rules {
		order[r] = i
	}
	var marks []marked
	seen := map[[2]int]bool{}
	for _, f := range c.Findings {
		if f.Intent < 0 || seen[[2]int{order[f.Rule], f.Intent}] {
			continue
		}
		seen[[2]int{order[f.Rule], f.Intent}] = true
		marks = append(marks, marked{f.Rule, f.Intent, f.Key, h.Promised(f.Rule)})
	}
	slices.SortStableFunc(marks, func(a, b marked) int {
		if a.promised != b.promised {
			if a.promised {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(order[a.rule], order[b.rule]), cmp.Compare(a.intent, b.intent))
	})
	flagged := map[int]string{} // intent -> outline colour; a violation wins
	for _, m := range marks {
		col := svgShown
		if m.promised {
			col = svgViolation
		}
		if flagged[m.intent] != svgViolation {
			flagged[m.intent] = col
		}
	}
	listed := marks[:min(len(marks), svgMaxListed)]

	// Per intent: its first attempt, its first 200, its effects' values.
	first := map[int]Attempt{}
	firstAck := map[int]Attempt{}
	for _, a := range h.Attempts {
		if _, ok := first[a.Intent]; !ok {
			first[a.Intent] = a
		}
		if _, ok := firstAck[a.Intent]; !ok && a.Type == OK {
			firstAck[a.Intent] = a
		}
	}
	bySHA := map[string]int{}
	for _, a := range h.Attempts {
		if _, ok := bySHA[a.BodySHA256]; !ok {
			bySHA[a.BodySHA256] = a.Intent
		}
	}
	values := map[int][]int64{}
	timed := len(h.Places) > 0
	for _, p := range h.Places {
		for _, e := range p.Effects {
			if n, ok := bySHA[e.BodySHA256]; ok {
				values[n] = append(values[n], e.Value)
			}
			timed = timed && e.AtUS != nil
		}
	}

	// The time axis: from 0 to the last thing that happened.
	var end int64 = 1
	for _, a := range h.Attempts {
		end = max(end, a.EndUS)
	}
	for _, e := range h.Servers {
		end = max(end, e.AtUS)
	}
	if timed {
		for _, p := range h.Places {
			for _, e := range p.Effects {
				end = max(end, *e.AtUS)
			}
		}
	}
	topMS, stepMS := svgAxis((end+999)/1000, 10)
	const (
		width, left, right = 1200, 120, 20
		plotW              = width - left - right
	)
	x := func(us int64) int64 { return left + max(us, 0)*plotW/(topMS*1000) }

	// Rows, top to bottom.
	const (
		headerH, legendH, markH = 76, 24, 36
		replicaH, clientH       = 18, 14
		sinkH, axisH, footLine  = 20, 44, 16
	)
	yLegend := int64(headerH)
	yMarks := yLegend + legendH
	yReplicas := yMarks + markH
	yClients := yReplicas + int64(h.Replicas)*replicaH
	ySink := yClients + int64(h.Clients)*clientH
	yAxis := ySink
	if timed {
		yAxis += sinkH
	}
	yFoot := yAxis + axisH
	height := yFoot + int64(len(listed)+1)*footLine + 8
	if len(marks) > len(listed) {
		height += footLine
	}

	line(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, width, height, width, height)
	line(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, width, height)
	what := "store " + string(h.Store)
	if h.Target != "" {
		what = "target " + h.Target
	}
	line(`<text x="%d" y="22" font-size="17" font-weight="bold">chaos on %s</text>`, left, svgEscape(what))
	claims := "keys in memory, not shared"
	switch {
	case h.Claims.Durable && h.Claims.SharedStore:
		claims = "durable, shared store"
	case h.Claims.Durable:
		claims = "durable, not shared"
	case h.Claims.SharedStore:
		claims = "not durable, shared store"
	}
	line(`<text x="%d" y="42" fill="#555555">seed %d, %s, %s, chaos phase %d ms, %s; claims: %s</text>`,
		left, h.Seed, svgCount(h.Replicas, "replica"), svgCount(h.Clients, "client"), h.DurationMS, svgEvery(h.KillEveryMS), claims)
	dupWord := "duplicates (violations)"
	if !h.Promised(RuleDuplicate) {
		dupWord = "duplicates (shown: not promised)"
	}
	verdict, vcol := "ok", "#2a7a2a"
	violations := 0
	for _, f := range c.Findings {
		if h.Promised(f.Rule) {
			violations++
		}
	}
	if violations > 0 {
		verdict, vcol = fmt.Sprintf("FAIL, %s", svgCount(violations, "violation")), svgViolation
	}
	line(`<text x="%d" y="62">%d intents, %d attempts: %d %s, %d lost acknowledgements, %d stuck: <tspan fill="%s" font-weight="bold">%s</tspan></text>`,
		left, c.Intents, len(h.Attempts), c.Duplicates, dupWord, c.LostAcks, c.Stuck, vcol, verdict)

	// The legend.
	lx := int64(left)
	for _, it := range []struct{ shape, colour, label string }{
		{"box", svgOK, "200"}, {"box", svgFail, "failed (refused, 4xx)"}, {"box", svgInfo, "unknown (no reply, timeout, 5xx)"},
		{"cap", svgFault, "fault sent"}, {"bar", svgKill, "kill -9"}, {"bar", svgFaultKill, "a fault's kill"},
		{"outline", svgViolation, "violation"}, {"outline", svgShown, "shown"},
	} {
		switch it.shape {
		case "box":
			line(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, lx, yLegend+4, it.colour)
		case "cap":
			line(`<rect x="%d" y="%d" width="12" height="4" fill="%s"/>`, lx, yLegend+4, it.colour)
		case "bar":
			line(`<rect x="%d" y="%d" width="4" height="12" fill="%s"/>`, lx+4, yLegend+4, it.colour)
		case "outline":
			line(`<rect x="%d" y="%d" width="12" height="12" fill="none" stroke="%s" stroke-width="2"/>`, lx, yLegend+4, it.colour)
		}
		line(`<text x="%d" y="%d">%s</text>`, lx+16, yLegend+14, it.label)
		lx += 16 + int64(len(it.label))*7 + 18
	}

	// The replicas: each process's life, then the events on it.
	line(`<g id="replicas">`)
	for r := 0; r < h.Replicas; r++ {
		y := yReplicas + int64(r)*replicaH
		line(`<text x="%d" y="%d" text-anchor="end">replica %d</text>`, left-8, y+13, r)
		var from int64 = -1
		for _, e := range h.Servers {
			if e.Replica != r {
				continue
			}
			switch e.Kind {
			case EventStart:
				from = e.AtUS
			case EventExit, EventStop:
				if from >= 0 {
					line(`<rect x="%d" y="%d" width="%d" height="%d" fill="#cfe3cf"/>`, x(from), y+3, max(x(e.AtUS)-x(from), 1), replicaH-6)
				}
				from = -1
			}
		}
		if from >= 0 {
			line(`<rect x="%d" y="%d" width="%d" height="%d" fill="#cfe3cf"/>`, x(from), y+3, max(x(end)-x(from), 1), replicaH-6)
		}
		for _, e := range h.Servers {
			if e.Replica != r {
				continue
			}
			px := x(e.AtUS)
			switch e.Kind {
			case EventKill:
				line(`<rect x="%d" y="%d" width="3" height="%d" fill="%s"/>`, px-1, y, replicaH, svgKill)
				line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-opacity="0.35"/>`, px, yClients, px, ySink, svgKill)
			case EventFaultKill:
				line(`<rect x="%d" y="%d" width="3" height="%d" fill="%s"/>`, px-1, y, replicaH, svgFaultKill)
			case EventKillSkipped:
				line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-dasharray="2,2"/>`, px, y, px, y+replicaH, svgKill)
			case EventStartFailed:
				line(`<rect x="%d" y="%d" width="3" height="%d" fill="#555555"/>`, px-1, y+5, replicaH-10)
			}
		}
	}
	line(`</g>`)

	// The clients' attempts.
	line(`<g id="attempts">`)
	for c := 0; c < h.Clients; c++ {
		line(`<text x="%d" y="%d" text-anchor="end" font-size="10">client %d</text>`, left-8, yClients+int64(c)*clientH+10, c)
	}
	for _, a := range h.Attempts {
		y := yClients + int64(a.Client)*clientH
		fill := svgInfo
		switch a.Type {
		case OK:
			fill = svgOK
		case Fail:
			fill = svgFail
		}
		x0 := x(a.StartUS)
		w := max(x(a.EndUS)-x0-1, 1) // a pixel apart from the next attempt
		if col, ok := flagged[a.Intent]; ok {
			line(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="%s" stroke-width="2"/>`, x0, y+2, w, clientH-4, fill, col)
		} else {
			line(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x0, y+2, w, clientH-4, fill)
		}
		if a.Fault != "" {
			line(`<rect x="%d" y="%d" width="%d" height="3" fill="%s"/>`, x0, y+2, w, svgFault)
		}
	}
	line(`</g>`)

	// The sink: a tick per effect, at when it was applied.
	if timed {
		line(`<g id="sink">`)
		line(`<text x="%d" y="%d" text-anchor="end">sink</text>`, left-8, ySink+14)
		for _, p := range h.Places {
			for _, e := range p.Effects {
				n, ok := bySHA[e.BodySHA256]
				px := x(*e.AtUS)
				if col, bad := flagged[n]; ok && bad {
					line(`<rect x="%d" y="%d" width="2" height="%d" fill="%s"/>`, px, ySink+2, sinkH-4, col)
				} else {
					line(`<rect x="%d" y="%d" width="1" height="%d" fill="#666666"/>`, px, ySink+6, sinkH-12)
				}
			}
		}
		line(`</g>`)
	}

	// The phases.
	bottom := yAxis
	for _, ph := range []struct {
		name string
		at   int64
	}{{"chaos", h.ChaosStartUS}, {"quiet", h.QuietStartUS}} {
		px := x(ph.at)
		line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888888" stroke-dasharray="4,3"/>`, px, yReplicas, px, bottom)
		line(`<text x="%d" y="%d" fill="#555555" font-size="10">%s phase</text>`, px+3, yReplicas+12, ph.name)
	}

	// The numbered findings above the lanes, in three rows: each number in
	// the first row where it does not touch the one before it, else in the
	// row whose last number is leftmost, just right of it.
	line(`<g id="findings">`)
	last := [3]int64{-100, -100, -100}
	for i, m := range listed {
		a := first[m.intent]
		if m.rule == RuleLostAck {
			a = firstAck[m.intent]
		}
		col := svgShown
		if m.promised {
			col = svgViolation
		}
		px := x(a.StartUS)
		row, fits := 0, false
		for r := range last {
			if px >= last[r]+svgMarkGap {
				row, fits = r, true
				break
			}
			if last[r] < last[row] {
				row = r
			}
		}
		if !fits {
			px = last[row] + svgMarkGap
		}
		last[row] = px
		line(`<text x="%d" y="%d" fill="%s" font-size="10" font-weight="bold">%d</text>`, px, yMarks+10+int64(row)*11, col, i+1)
	}
	line(`</g>`)

	// The time axis.
	line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, left, yAxis, left+plotW, yAxis)
	for t := int64(0); t <= topMS; t += stepMS {
		px := left + t*plotW/topMS
		line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, px, yAxis, px, yAxis+5)
		line(`<text x="%d" y="%d" text-anchor="middle">%d</text>`, px, yAxis+18, t)
	}
	line(`<text x="%d" y="%d" text-anchor="middle">time since the run began (ms)</text>`, left+plotW/2, yAxis+36)

	// The findings listed.
	if len(marks) == 0 {
		line(`<text x="%d" y="%d">no finding</text>`, left, yFoot+12)
	} else {
		line(`<text x="%d" y="%d" font-weight="bold">findings (%s; the first %d numbered above):</text>`, left, yFoot+12, svgCount(len(marks), "intent"), len(listed))
	}
	for i, m := range listed {
		col := svgShown
		kind := "shown"
		if m.promised {
			col, kind = svgViolation, "violation"
		}
		fact := ""
		switch m.rule {
		case RuleDuplicate:
			vs := slices.Clone(values[m.intent])
			slices.Sort(vs)
			parts := make([]string, len(vs))
			for j, v := range vs {
				parts[j] = strconv.FormatInt(v, 10)
			}
			fact = fmt.Sprintf(": applied %d times, values %s", len(vs), strings.Join(parts, ", "))
		case RuleLostAck:
			a := firstAck[m.intent]
			fact = fmt.Sprintf(": a 200 at %d ms (attempt %d, replica %d), and no effect of it in the journal", a.EndUS/1000, a.Attempt, a.Replica)
		case RuleStuck:
			fact = fmt.Sprintf(": never acknowledged, applied %s", svgCount(len(values[m.intent]), "time"))
		}
		line(`<text x="%d" y="%d"><tspan fill="%s" font-weight="bold">%d</tspan> %s %s: intent %d (key %s)%s</text>`,
			left, yFoot+12+int64(i+1)*footLine, col, i+1, kind, m.rule, m.intent, svgEscape(m.key), fact)
	}
	if len(marks) > len(listed) {
		line(`<text x="%d" y="%d">... and %d more (chaos.json lists them)</text>`, left, yFoot+12+int64(len(listed)+1)*footLine, len(marks)-len(listed))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// The timeline's colours.
const (
	svgOK        = "#4a9a4a"
	svgFail      = "#a0a0a0"
	svgInfo      = "#e69500"
	svgFault     = "#5a2a82"
	svgKill      = "#d00000"
	svgFaultKill = "#ff7f00"
	svgViolation = "#d00000"
	svgShown     = "#c000c0"
)

// svgMaxListed bounds the findings numbered and listed; svgMarkGap is the
// room (px) a number takes in its row.
const (
	svgMaxListed = 12
	svgMarkGap   = 16
)

// svgEvery is the nemesis's interval as the subtitle says it.
func svgEvery(ms int64) string {
	if ms <= 0 {
		return "no kill -9"
	}
	return "kill -9 every " + strconv.FormatInt(ms, 10) + " ms"
}

// svgCount is "1 replica", "2 replicas".
func svgCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// svgAxis returns the smallest axis top ≥ v (at least 1) whose step, 1, 2
// or 5 times a power of ten, divides it into at most ticks steps.
func svgAxis(v int64, ticks int64) (top, step int64) {
	v = max(v, 1)
	for mag := int64(1); ; mag *= 10 {
		for _, m := range []int64{1, 2, 5} {
			step = m * mag
			if k := (v + step - 1) / step; k <= ticks {
				return k * step, step
			}
		}
	}
}

// svgEscape escapes text for an SVG text node.
func svgEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
