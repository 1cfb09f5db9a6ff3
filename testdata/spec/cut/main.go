// Cut writes a small, self-consistent piece of a chaos history the lab
// wrote, for the specification corpus (testdata/spec/chaos).
//
// Usage:
//
//	go run ./testdata/spec/cut [-intents N] HISTORY.jsonl > testdata/spec/chaos/NAME.jsonl
//
// It keeps the intents numbered below N (default 30) whose every journal
// effect lies in the prefix of its place's journal that holds only kept
// intents' effects, drops the intents that fail that (repeating until no
// more drop), and writes every attempt of the kept intents, every server
// event of the run, and per place that journal prefix (its counter the
// prefix's length), each line as the lab wrote it but for the counts the
// cut changes. The piece is what the checker would have seen of a run
// that issued only those intents, so its findings are a subset of the
// whole run's: a clean run cuts to a clean piece, a volatile run's
// duplicates of kept intents stay. Server event counts (kills, restarts,
// ...) are the whole run's.
//
// Exit status: 0 written, 1 the history cannot be read or the cut is
// empty, 2 usage.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cut", flag.ContinueOnError)
	fs.SetOutput(stderr)
	intents := fs.Int("intents", 30, "keep intents numbered below `N` (1..10000)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *intents < 1 || *intents > 10000 {
		fmt.Fprintln(stderr, "usage: cut [-intents N] HISTORY.jsonl   (N in 1..10000)")
		return 2
	}
	if err := cut(fs.Arg(0), *intents, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "cut: %v\n", err)
		return 1
	}
	return 0
}

// line is one history line: its bytes and the members the cut reads.
type line struct {
	raw    []byte
	Kind   string `json:"kind"`
	Intent int    `json:"intent"`
	SHA    string `json:"body_sha256"`
}

// place is one place's line and its effects.
type place struct {
	head    line
	effects []line
}

func cut(path string, below int, stdout, stderr io.Writer) error {
	header, events, places, err := read(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	intentOf := map[string]int{} // body SHA-256 -> intent
	keep := map[int]bool{}
	for _, e := range events {
		if e.Kind == "attempt" {
			intentOf[e.SHA] = e.Intent
			if e.Intent < below {
				keep[e.Intent] = true
			}
		}
	}
	// prefix[i] is how many leading effects of place i belong to kept intents.
	prefix := make([]int, len(places))
	for changed := true; changed; {
		changed = false
		for i, p := range places {
			prefix[i] = len(p.effects)
			for j, e := range p.effects {
				if n, ok := intentOf[e.SHA]; !ok || !keep[n] {
					prefix[i] = j
					break
				}
			}
			for _, e := range p.effects[prefix[i]:] {
				if n, ok := intentOf[e.SHA]; ok && keep[n] {
					delete(keep, n)
					changed = true
				}
			}
		}
	}
	if len(keep) == 0 {
		return errors.New("no intent left after the cut")
	}
	var out bytes.Buffer
	var kept []line
	attempts := 0
	for _, e := range events {
		if e.Kind != "attempt" || keep[e.Intent] {
			kept = append(kept, e)
			if e.Kind == "attempt" {
				attempts++
			}
		}
	}
	out.Write(setCount(header.raw, "attempts", attempts))
	for _, e := range kept {
		out.Write(e.raw)
	}
	for i, p := range places {
		head := setCount(setCount(p.head.raw, "counter", prefix[i]), "effects", prefix[i])
		out.Write(head)
		for _, e := range p.effects[:prefix[i]] {
			out.Write(e.raw)
		}
		fmt.Fprintf(stderr, "place %d: %d of %d effects kept\n", i, prefix[i], len(p.effects))
	}
	fmt.Fprintf(stderr, "%d intents, %d attempts, %d lines of attempts and server events kept\n", len(keep), attempts, len(kept))
	_, err = stdout.Write(out.Bytes())
	return err
}

// read splits a history into its header, its attempts and server events
// in order, and its places with their effects.
func read(path string) (header line, events []line, places []place, err error) {
	f, err := os.Open(path)
	if err != nil {
		return header, nil, nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	for no := 1; ; no++ {
		raw, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			break
		}
		if err != nil {
			return header, nil, nil, fmt.Errorf("line %d: %w", no, err)
		}
		l := line{raw: raw}
		if err := json.Unmarshal(raw, &l); err != nil {
			return header, nil, nil, fmt.Errorf("line %d: %w", no, err)
		}
		switch {
		case no == 1 && l.Kind == "run":
			header = l
		case no == 1:
			return header, nil, nil, fmt.Errorf("line 1: kind %q, want the run header", l.Kind)
		case l.Kind == "place":
			places = append(places, place{head: l})
		case l.Kind == "effect" && len(places) > 0:
			places[len(places)-1].effects = append(places[len(places)-1].effects, l)
		case l.Kind == "effect":
			return header, nil, nil, fmt.Errorf("line %d: an effect before any place line", no)
		case len(places) > 0:
			return header, nil, nil, fmt.Errorf("line %d: a %s line after the places", no, l.Kind)
		default:
			events = append(events, l)
		}
	}
	return header, events, places, nil
}

// setCount rewrites the integer member name of a line as the lab wrote
// it, keeping every other byte.
func setCount(raw []byte, name string, n int) []byte {
	re := regexp.MustCompile(`"` + name + `":-?[0-9]+`)
	return re.ReplaceAll(raw, []byte(fmt.Sprintf(`"%s":%d`, name, n)))
}
