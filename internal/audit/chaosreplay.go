package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// checkChaosReplay reads sub's history a second time, once the first pass
// judged it (hist, c): every attempt and planned kill against the seeded
// schedule drawn again (chaosschedule.go), and every line into the audit's
// own timeline (chaossvg.go), which must be chaos-NAME.svg byte for byte.
func (a *auditor) checkChaosReplay(sub chaosSubject, hist *chaosHistory, c chaosCheck) {
	name := sub.base() + ".jsonl"
	f, err := openInside(a.opts.Evidence, name, CapHistory)
	if err != nil {
		return // reported by the file checks
	}
	sc := newScheduleCheck(hist)
	tl := newTimeline(hist, c)
	err = replayHistory(io.LimitReader(f, CapHistory+1), sc, tl)
	f.Close()
	if err != nil {
		a.chaosFail(sub, "history", "%s: the second reading: %v", name, err)
		return
	}
	sc.finish()
	for i, bad := range sc.bad {
		a.check()
		if i == maxChaosLines {
			a.chaosFail(sub, "schedule", "%s: the schedule: %d more differences", name, len(sc.bad)-i)
			break
		}
		a.chaosFail(sub, "schedule", "%s: the schedule: %s", name, bad)
	}
	if len(sc.bad) == 0 {
		a.check() // the schedule agreed, line by line
	}

	svgName := sub.base() + ".svg"
	a.check()
	if !a.isListed(svgName) {
		a.chaosFail(sub, "files", "file %s: the timeline of %s's chaos run: not listed in manifest.files", svgName, sub)
		return
	}
	data, err := readInside(a.opts.Evidence, svgName, CapHistory)
	if err != nil {
		return // reported by the file checks
	}
	if want := tl.svg(); !bytes.Equal(data, want) {
		a.chaosFail(sub, "timeline", "file %s: differs from the audit's own drawing of %s: %s", svgName, name, firstDiff(want, data))
	}
}

// replayHistory streams a history the first pass read without error into
// the schedule check and the timeline.
func replayHistory(r io.Reader, sc *scheduleCheck, tl *timeline) error {
	br := bufio.NewReaderSize(r, maxHistoryLine)
	for no := 1; ; no++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("line %d: %v", no, err)
		}
		v, err := decodeJSON(line)
		obj, _ := v.(map[string]any)
		if err != nil || obj == nil {
			return fmt.Errorf("line %d: not a JSON object: %v", no, err)
		}
		l := &lineReader{no: no, obj: obj}
		switch kind, _ := obj["kind"].(string); kind {
		case "attempt":
			intent, n := l.int("intent", 0, maxInt), l.int("attempt", 0, maxInt)
			client, replica := l.int("client", 0, maxInt), l.int("replica", 0, maxInt)
			start, end := l.int("start_us", 0, maxInt), l.int("end_us", 0, maxInt)
			phase, fault, typ := l.str("phase"), l.str("fault"), l.str("type")
			sc.attempt(no, intent, n, replica, phase, fault, start)
			tl.attempt(intent, client, start, end, typ, fault)
		case "effect":
			if obj["at_us"] != nil {
				tl.effect(l.str("body_sha256"), l.int("at_us", 0, maxInt))
			}
		case "run", "place":
		default:
			replica, at := l.int("replica", 0, maxInt), l.int("at_us", 0, maxInt)
			sc.event(no, kind, replica, at, l.int("planned", -1, maxInt), l.str("error"))
			tl.event(kind, replica, at)
		}
		if l.err != nil {
			return l.err
		}
	}
}
