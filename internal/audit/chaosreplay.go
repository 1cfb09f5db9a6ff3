package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// checkChaosReplay reads sub's history (name) a second time, once the
// first pass judged it (hist, c), every line into the audit's own
// timeline (chaossvg.go), written as chaos-NAME.svg.
func (a *auditor) checkChaosReplay(sub chaosSubject, name string, hist *chaosHistory, c chaosCheck) {
	f, err := openInside(a.opts.Evidence, name, CapHistory)
	if err != nil {
		return // reported by the file checks
	}
	tl := newTimeline(hist, c)
	err = replayHistory(io.LimitReader(f, CapHistory+1), tl)
	f.Close()
	if err != nil {
		a.chaosFail(sub, "history", "%s: the second reading: %v", name, err)
		return
	}
	a.claim("chaos_timeline")
	a.emit(sub.base()+".svg", tl.svg())
}

// sameStream compares want with what r gives, a chunk at a time; when
// they differ it returns the offset of the first difference and a few
// bytes of r from there.
func sameStream(want []byte, r io.Reader) (int64, string, bool) {
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		got := buf[:n]
		rest := want[min(int64(len(want)), off):]
		for i := range got {
			if i >= len(rest) || got[i] != rest[i] {
				return off + int64(i), string(got[i:min(len(got), i+60)]), false
			}
		}
		off += int64(n)
		if err != nil {
			if off != int64(len(want)) {
				return off, "(the end of the file)", false
			}
			return 0, "", true
		}
	}
}

// replayHistory streams a history the first pass read without error into
// the timeline.
func replayHistory(r io.Reader, tl *timeline) error {
	br := bufio.NewReaderSize(r, maxHistoryLine)
	var l lineReader
	for no := 1; ; no++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("line %d: %v", no, err)
		}
		if err := l.read(no, line); err != nil {
			return err
		}
		switch kind := l.kind; kind {
		case "attempt":
			intent, client := l.int("intent", 0, maxInt), l.int("client", 0, maxInt)
			start, end := l.int("start_us", 0, maxInt), l.int("end_us", 0, maxInt)
			tl.attempt(intent, client, start, end, l.str("type"), l.str("fault"))
		case "effect":
			if l.get("at_us").kind == 'n' {
				_, sum := l.sha("body_sha256")
				tl.effect(sum, l.int("at_us", 0, maxInt))
			}
		case "run", "place":
		default:
			tl.event(kind, l.int("replica", 0, maxInt), l.int("at_us", 0, maxInt))
		}
		if l.err != nil {
			return l.err
		}
	}
}
