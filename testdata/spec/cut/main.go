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
// prefix's length), with chaos.History.Write: the lab's exact format. The
// piece is what the checker would have seen of a run that issued only
// those intents, so its findings are a subset of the whole run's: a clean
// run cuts to a clean piece, a volatile run's duplicates of kept intents
// stay. Server event counts (kills, restarts, ...) are the whole run's.
//
// Exit status: 0 written, 1 the history cannot be read or the cut is
// empty, 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"idemlab/internal/chaos"
	"idemlab/internal/store"
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

func cut(path string, below int, stdout, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := chaos.ReadHistory(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	intentOf := map[string]int{} // body SHA-256 -> intent
	keep := map[int]bool{}
	for _, a := range h.Attempts {
		intentOf[a.BodySHA256] = a.Intent
		if a.Intent < below {
			keep[a.Intent] = true
		}
	}
	// prefix[i] is how many leading effects of place i belong to kept intents.
	prefix := make([]int, len(h.Places))
	for changed := true; changed; {
		changed = false
		for i, p := range h.Places {
			prefix[i] = len(p.Effects)
			for j, e := range p.Effects {
				if n, ok := intentOf[e.BodySHA256]; !ok || !keep[n] {
					prefix[i] = j
					break
				}
			}
		}
		for i, p := range h.Places {
			for _, e := range p.Effects[prefix[i]:] {
				if n, ok := intentOf[e.BodySHA256]; ok && keep[n] {
					delete(keep, n)
					changed = true
				}
			}
		}
	}
	if len(keep) == 0 {
		return errors.New("no intent left after the cut")
	}
	out := chaos.History{Store: h.Store, Seed: h.Seed, Replicas: h.Replicas, Servers: h.Servers}
	for _, a := range h.Attempts {
		if keep[a.Intent] {
			out.Attempts = append(out.Attempts, a)
		}
	}
	for i, p := range h.Places {
		effects := append([]store.Effect{}, p.Effects[:prefix[i]]...)
		out.Places = append(out.Places, chaos.Place{Place: p.Place, Replicas: p.Replicas, Counter: int64(len(effects)), Effects: effects})
		fmt.Fprintf(stderr, "place %d: %d of %d effects kept\n", p.Place, len(effects), len(p.Effects))
	}
	fmt.Fprintf(stderr, "%d intents, %d attempts, %d server events kept\n", len(keep), len(out.Attempts), len(out.Servers))
	return out.Write(stdout)
}
