package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file is the audit's own drawing of a chaos history's timeline
// (chaos-NAME.svg, docs/chaos.md): the run's header, a legend, a lane per
// replica and per client, the sink's lane where the journal times its
// effects, the two phases, the first findings numbered above the lanes,
// the time axis, and the findings listed. Integer arithmetic only. It is
// drawn while the history is streamed a second time: the lanes' contents
// in file order, into one buffer per section, joined at the end.

// The timeline's geometry and colours (px).
const (
	tlWidth, tlLeft, tlRight = 1200, 120, 20
	tlPlotW                  = tlWidth - tlLeft - tlRight
	tlHeader, tlLegend       = 76, 24
	tlMarks                  = 36
	tlReplica, tlClient      = 18, 14
	tlSink, tlAxis, tlFoot   = 20, 44, 16
	tlMaxListed, tlMarkGap   = 12, 16

	tlOK, tlFail, tlInfo = "#4a9a4a", "#a0a0a0", "#e69500"
	tlFault, tlKill      = "#5a2a82", "#d00000"
	tlFaultKill          = "#ff7f00"
	tlViolation, tlShown = "#d00000", "#c000c0"
	tlLife               = "#cfe3cf"
)

// A tlMark is one finding the timeline numbers and lists: a (rule,
// intent) pair, the intent's effects' values in ascending order, and its
// first 2xx's start, end, attempt and replica (nil: none).
type tlMark struct {
	rule     string
	intent   int64
	key      string
	promised bool
	values   []int64
	ack      *[4]int64
}

// timeline draws one history while it is streamed.
type timeline struct {
	h      *chaosHistory
	c      chaosCheck
	marks  int64           // (rule, intent) pairs that fired
	listed []tlMark        // the first of them, numbered
	first  map[int64]int64 // listed intent -> its first attempt's start
	end    int64           // the latest time drawn: of any attempt or event, and of the effects of a timed journal
	topMS  int64
	stepMS int64

	yMarks, yReplicas, yClients, ySink, yAxis, yFoot, height int64

	life, events []strings.Builder // per replica
	from         []int64           // per replica: the start of the process now running, -1 none
	attempts     strings.Builder
	sink         strings.Builder
}

func newTimeline(h *chaosHistory, c chaosCheck) *timeline {
	t := &timeline{h: h, c: c, marks: c.markCount, listed: c.marks, first: map[int64]int64{}}
	for _, m := range t.listed {
		t.first[m.intent] = -1
	}
	t.end = max(h.endUS, 1)
	if h.timed {
		t.end = max(t.end, h.effectEndUS)
	}
	t.topMS, t.stepMS = axis(max((t.end+999)/1000, 1), 10)
	t.yMarks = tlHeader + tlLegend
	t.yReplicas = t.yMarks + tlMarks
	t.yClients = t.yReplicas + int64(h.replicas)*tlReplica
	t.ySink = t.yClients + int64(h.clients)*tlClient
	t.yAxis = t.ySink
	if h.timed {
		t.yAxis += tlSink
	}
	t.yFoot = t.yAxis + tlAxis
	t.height = t.yFoot + int64(len(t.listed)+1)*tlFoot + 8
	if t.marks > int64(len(t.listed)) {
		t.height += tlFoot
	}
	t.life = make([]strings.Builder, h.replicas)
	t.events = make([]strings.Builder, h.replicas)
	t.from = slices.Repeat([]int64{-1}, h.replicas)
	return t
}

// x is the horizontal position of time us (µs from the run's start).
func (t *timeline) x(us int64) int64 { return tlLeft + max(us, 0)*tlPlotW/(t.topMS*1000) }

func put(b *strings.Builder, format string, args ...any) {
	fmt.Fprintf(b, format, args...)
	b.WriteByte('\n')
}

// attempt draws one attempt line.
func (t *timeline) attempt(intent, client, start, end int64, typ, fault string) {
	if s, ok := t.first[intent]; ok && s < 0 {
		t.first[intent] = start
	}
	y := t.yClients + client*tlClient
	fill := tlInfo
	switch typ {
	case "ok":
		fill = tlOK
	case "fail":
		fill = tlFail
	}
	x0 := t.x(start)
	w := max(t.x(end)-x0-1, 1)
	col := t.h.flag(t.h.byNum(intent))
	if col != "" {
		put(&t.attempts, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="%s" stroke-width="2"/>`, x0, y+2, w, tlClient-4, fill, col)
	} else {
		put(&t.attempts, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x0, y+2, w, tlClient-4, fill)
	}
	if fault != "" {
		put(&t.attempts, `<rect x="%d" y="%d" width="%d" height="3" fill="%s"/>`, x0, y+2, w, tlFault)
	}
}

// event draws one server event line.
func (t *timeline) event(kind string, replica, at int64) {
	y := t.yReplicas + replica*tlReplica
	px := t.x(at)
	switch kind {
	case "start":
		t.from[replica] = at
	case "exit", "stop":
		if f := t.from[replica]; f >= 0 {
			put(&t.life[replica], `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, t.x(f), y+3, max(t.x(at)-t.x(f), 1), tlReplica-6, tlLife)
		}
		t.from[replica] = -1
	case "kill":
		put(&t.events[replica], `<rect x="%d" y="%d" width="3" height="%d" fill="%s"/>`, px-1, y, tlReplica, tlKill)
		put(&t.events[replica], `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-opacity="0.35"/>`, px, t.yClients, px, t.ySink, tlKill)
	case "fault_kill":
		put(&t.events[replica], `<rect x="%d" y="%d" width="3" height="%d" fill="%s"/>`, px-1, y, tlReplica, tlFaultKill)
	case "kill_skipped":
		put(&t.events[replica], `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-dasharray="2,2"/>`, px, y, px, y+tlReplica, tlKill)
	case "start_failed":
		put(&t.events[replica], `<rect x="%d" y="%d" width="3" height="%d" fill="#555555"/>`, px-1, y+5, tlReplica-10)
	}
}

// effect draws one effect line of a timed journal.
func (t *timeline) effect(sum [32]byte, at int64) {
	if !t.h.timed {
		return
	}
	px := t.x(at)
	col := t.h.flag(t.h.bySum(sum))
	if col != "" {
		put(&t.sink, `<rect x="%d" y="%d" width="2" height="%d" fill="%s"/>`, px, t.ySink+2, tlSink-4, col)
	} else {
		put(&t.sink, `<rect x="%d" y="%d" width="1" height="%d" fill="#666666"/>`, px, t.ySink+6, tlSink-12)
	}
}

// svg joins the sections into the document: the header and the legend,
// the lanes, the findings' numbers, the time axis and the findings listed.
func (t *timeline) svg() []byte {
	var b strings.Builder
	put(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, tlWidth, t.height, tlWidth, t.height)
	put(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, tlWidth, t.height)
	t.header(&b)
	t.legend(&b)
	t.lanes(&b)
	t.numbers(&b)
	t.axis(&b)
	t.listing(&b)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// header writes what ran, its parameters and claims, and the counts and
// verdict a reader looks for first.
func (t *timeline) header(b *strings.Builder) {
	h, c := t.h, t.c
	what := chaosSubject{store: h.store, target: h.target, trial: h.trial}.String()
	put(b, `<text x="%d" y="22" font-size="17" font-weight="bold">chaos on %s</text>`, tlLeft, xmlText(what))
	claims := map[chaosClaims]string{{}: "keys in memory, not shared", {true, false}: "durable, not shared",
		{false, true}: "not durable, shared store", {true, true}: "durable, shared store"}[h.claims]
	kills := "no kill -9"
	if h.killEveryMS > 0 {
		kills = fmt.Sprintf("kill -9 every %d ms", h.killEveryMS)
	}
	put(b, `<text x="%d" y="42" fill="#555555">seed %d, %s, %s, chaos phase %d ms, %s; claims: %s</text>`,
		tlLeft, h.seed, plural(h.replicas, "replica"), plural(h.clients, "client"), h.durationMS, kills, claims)
	dups := "duplicates (violations)"
	if !h.promised("duplicate") {
		dups = "duplicates (shown: not promised)"
	}
	var violations int64
	for _, rule := range chaosRules {
		if h.promised(rule) {
			violations += c.fired[rule]
		}
	}
	verdict, colour := "ok", "#2a7a2a"
	if violations > 0 {
		verdict, colour = fmt.Sprintf("FAIL, %s", plural(int(violations), "violation")), tlViolation
	}
	put(b, `<text x="%d" y="62">%d intents, %d attempts: %d %s, %d lost acknowledgements, %d stuck: <tspan fill="%s" font-weight="bold">%s</tspan></text>`,
		tlLeft, c.counts["intents"], h.attempts, c.counts["duplicates"], dups, c.counts["lost_acks"], c.counts["stuck"], colour, verdict)
}

// legend writes a swatch and its words for each mark, each item 34 px
// plus 7 per letter.
func (t *timeline) legend(b *strings.Builder) {
	lx, ly := int64(tlLeft), int64(tlHeader)
	for _, it := range []struct{ shape, colour, label string }{
		{"box", tlOK, "2xx"}, {"box", tlFail, "failed (refused, 4xx)"}, {"box", tlInfo, "unknown (no reply, timeout, 5xx)"},
		{"cap", tlFault, "fault sent"}, {"bar", tlKill, "kill -9"}, {"bar", tlFaultKill, "a fault's kill"},
		{"outline", tlViolation, "violation"}, {"outline", tlShown, "shown"},
	} {
		switch it.shape {
		case "box":
			put(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, lx, ly+4, it.colour)
		case "cap":
			put(b, `<rect x="%d" y="%d" width="12" height="4" fill="%s"/>`, lx, ly+4, it.colour)
		case "bar":
			put(b, `<rect x="%d" y="%d" width="4" height="12" fill="%s"/>`, lx+4, ly+4, it.colour)
		case "outline":
			put(b, `<rect x="%d" y="%d" width="12" height="12" fill="none" stroke="%s" stroke-width="2"/>`, lx, ly+4, it.colour)
		}
		put(b, `<text x="%d" y="%d">%s</text>`, lx+16, ly+14, it.label)
		lx += 34 + int64(len(it.label))*7
	}
}

// lanes writes the replicas' lanes, the clients', the sink's where the
// journal is timed, and the two phases' marks.
func (t *timeline) lanes(b *strings.Builder) {
	h := t.h
	b.WriteString("<g id=\"replicas\">\n")
	for r := range h.replicas {
		y := t.yReplicas + int64(r)*tlReplica
		put(b, `<text x="%d" y="%d" text-anchor="end">replica %d</text>`, tlLeft-8, y+13, r)
		b.WriteString(t.life[r].String())
		if f := t.from[r]; f >= 0 {
			put(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, t.x(f), y+3, max(t.x(t.end)-t.x(f), 1), tlReplica-6, tlLife)
		}
		b.WriteString(t.events[r].String())
	}
	b.WriteString("</g>\n<g id=\"attempts\">\n")
	for cl := range h.clients {
		put(b, `<text x="%d" y="%d" text-anchor="end" font-size="10">client %d</text>`, tlLeft-8, t.yClients+int64(cl)*tlClient+10, cl)
	}
	b.WriteString(t.attempts.String())
	b.WriteString("</g>\n")
	if h.timed {
		b.WriteString("<g id=\"sink\">\n")
		put(b, `<text x="%d" y="%d" text-anchor="end">sink</text>`, tlLeft-8, t.ySink+14)
		b.WriteString(t.sink.String())
		b.WriteString("</g>\n")
	}
	for _, ph := range []struct {
		name string
		at   int64
	}{{"chaos", h.chaosStartUS}, {"quiet", h.quietStartUS}} {
		px := t.x(ph.at)
		put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888888" stroke-dasharray="4,3"/>`, px, t.yReplicas, px, t.yAxis)
		put(b, `<text x="%d" y="%d" fill="#555555" font-size="10">%s phase</text>`, px+3, t.yReplicas+12, ph.name)
	}
}

// numbers writes the findings' numbers, each at its intent's first
// attempt (a lost acknowledgement's: its first 2xx), in the first of
// three rows where it keeps 16 px from the number before it, else in the
// row whose last number is leftmost, 16 px right of that one.
func (t *timeline) numbers(b *strings.Builder) {
	b.WriteString("<g id=\"findings\">\n")
	last := []int64{-100, -100, -100}
	for i, m := range t.listed {
		start := max(t.first[m.intent], 0)
		if m.rule == "lost_ack" && m.ack != nil {
			start = m.ack[0]
		}
		colour := tlShown
		if m.promised {
			colour = tlViolation
		}
		px := t.x(start)
		row := slices.IndexFunc(last, func(l int64) bool { return px >= l+tlMarkGap })
		if row < 0 {
			row = slices.Index(last, slices.Min(last))
			px = last[row] + tlMarkGap
		}
		last[row] = px
		put(b, `<text x="%d" y="%d" fill="%s" font-size="10" font-weight="bold">%d</text>`, px, t.yMarks+10+int64(row)*11, colour, i+1)
	}
	b.WriteString("</g>\n")
}

// axis writes the time axis, in ms.
func (t *timeline) axis(b *strings.Builder) {
	put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, tlLeft, t.yAxis, tlLeft+tlPlotW, t.yAxis)
	for ms := int64(0); ms <= t.topMS; ms += t.stepMS {
		px := tlLeft + ms*tlPlotW/t.topMS
		put(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, px, t.yAxis, px, t.yAxis+5)
		put(b, `<text x="%d" y="%d" text-anchor="middle">%d</text>`, px, t.yAxis+18, ms)
	}
	put(b, `<text x="%d" y="%d" text-anchor="middle">time since the run began (ms)</text>`, tlLeft+tlPlotW/2, t.yAxis+36)
}

// listing writes the findings numbered above, each with its rule, its
// intent and what happened, and how many more there are.
func (t *timeline) listing(b *strings.Builder) {
	if t.marks == 0 {
		put(b, `<text x="%d" y="%d">no finding</text>`, tlLeft, t.yFoot+12)
	} else {
		put(b, `<text x="%d" y="%d" font-weight="bold">findings (%s; the first %d numbered above):</text>`, tlLeft, t.yFoot+12, plural(int(t.marks), "intent"), len(t.listed))
	}
	for i, m := range t.listed {
		colour, kind := tlShown, "shown"
		if m.promised {
			colour, kind = tlViolation, "violation"
		}
		vs := m.values
		fact := ""
		switch m.rule {
		case "duplicate":
			parts := make([]string, len(vs))
			for j, v := range vs {
				parts[j] = strconv.FormatInt(v, 10)
			}
			fact = fmt.Sprintf(": applied %d times, values %s", len(vs), strings.Join(parts, ", "))
		case "lost_ack":
			a := m.ack
			if a == nil {
				a = &[4]int64{}
			}
			fact = fmt.Sprintf(": a 2xx at %d ms (attempt %d, replica %d), and no effect of it in the journal", a[1]/1000, a[2], a[3])
		case "stuck":
			fact = fmt.Sprintf(": never acknowledged, applied %s", plural(len(vs), "time"))
		}
		put(b, `<text x="%d" y="%d"><tspan fill="%s" font-weight="bold">%d</tspan> %s %s: intent %d (key %s)%s</text>`,
			tlLeft, t.yFoot+12+int64(i+1)*tlFoot, colour, i+1, kind, m.rule, m.intent, xmlText(m.key), fact)
	}
	if t.marks > int64(len(t.listed)) {
		put(b, `<text x="%d" y="%d">... and %d more (chaos.json lists them)</text>`, tlLeft, t.yFoot+12+int64(len(t.listed)+1)*tlFoot, t.marks-int64(len(t.listed)))
	}
}

// xmlText escapes s for XML text or a double-quoted attribute (the SVG
// drawings, TARGETS.md's anchors): the markup characters as references,
// and what XML 1.0 cannot hold or a line must not (controls, separators)
// as visible escapes (oneLine, report.go).
func xmlText(s string) string {
	return xmlEscaper.Replace(oneLine(s))
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")
