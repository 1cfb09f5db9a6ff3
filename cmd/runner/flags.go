package main

import (
	"errors"
	"flag"
	"fmt"
	"idemlab/internal/audit/shard"
	"io"
	"strconv"
	"strings"
	"time"

	"idemlab/internal/chaos"
	"idemlab/internal/flaghelp"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/runner"
)

// maxArgBytes bounds every command-line argument, so that no message
// echoes an unbounded value (the flag package quotes a bad value whole).
const maxArgBytes = 4096

// A bound is the range a numeric flag accepts (a duration's in
// time.Duration units): outside it is a usage error before anything runs.
type bound struct {
	flag     string
	min, max int64
}

// text is the range as the help and docs/bounds.md show it.
func (b bound) text(duration bool) string {
	if duration {
		return time.Duration(b.min).String() + ".." + time.Duration(b.max).String()
	}
	return strconv.FormatInt(b.min, 10) + ".." + strconv.FormatInt(b.max, 10)
}

// bounds is every numeric flag's range. A zero is refused where it is
// outside the range: no flag at 0 silently means its default.
var bounds = []bound{
	{"intents", 1, retries.MaxIntents},
	{"workers", 1, retries.MaxWorkers},
	{"attempts", 1, retries.MaxAttempts},
	{"drop-percent", 0, 100},
	{"timeout-ms", 1, retries.MaxClientTimeoutMS},
	{"deadline-ms", 0, retries.MaxTotalDeadlineMS},
	{"duration", int64(time.Millisecond), int64(chaos.MaxDuration)},
	{"clients", 1, chaos.MaxClients},
	{"replicas", 1, chaos.MaxReplicas},
	{"trials", 1, runner.MaxTrials},
	{"chaos-trials", 1, runner.MaxChaosTrials},
}

// boundOf returns the range of the named flag, if it has one.
func boundOf(name string) (bound, bool) {
	for _, b := range bounds {
		if b.flag == name {
			return b, true
		}
	}
	return bound{}, false
}

// checkBounds refuses a numeric flag outside its range, naming all three.
func checkBounds(fs *flag.FlagSet) error {
	for _, b := range bounds {
		f := fs.Lookup(b.flag)
		var v int64
		duration := false
		switch x := f.Value.(flag.Getter).Get().(type) {
		case int:
			v = int64(x)
		case time.Duration:
			v, duration = int64(x), true
		default:
			panic(fmt.Sprintf("runner: flag -%s has a bound but is a %T", b.flag, x))
		}
		if v < b.min || v > b.max {
			return fmt.Errorf("-%s %s: outside %s", b.flag, f.Value, b.text(duration))
		}
	}
	return nil
}

// checkArgs refuses an argument longer than maxArgBytes without echoing it.
func checkArgs(args []string) error {
	for i, a := range args {
		if len(a) > maxArgBytes {
			return fmt.Errorf("argument %d is %d bytes, at most %d", i+1, len(a), maxArgBytes)
		}
	}
	return nil
}

// value is a flag.Value parsed by a function, shown as s.
type value struct {
	s   string
	set func(string) error
}

func (v *value) String() string { return v.s }

func (v *value) Set(s string) error {
	if err := v.set(s); err != nil {
		return err
	}
	v.s = s
	return nil
}

// groups order the help's flags under their headings; every flag is in
// exactly one (TestHelpCoversFlags).
var groups = []struct {
	title string
	flags []string
}{
	{"Flags:", []string{"out", "store", "target", "case", "experiment", "unsafe-registry", "server", "pg-dsn", "trials", "shard", "seed", "sign", "junit", "strict"}},
	{"The retries experiment's knobs:", []string{"intents", "drop-percent", "timeout-ms", "attempts", "workers", "deadline-ms"}},
	{"The chaos experiment's knobs:", []string{"duration", "clients", "replicas", "chaos-trials"}},
}

// newFlags defines the runner's flags into o. The usage strings are the
// help text: each flag's argument name is the back-quoted word.
func newFlags(o *runner.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, help by -h
	fs.StringVar(&o.Out, "out", "", "write the evidence into the folder `DIR` (-out evidence regenerates the committed evidence); it may hold only files the runner writes, and may be neither the checkout itself nor inside its sources (cases/, schema/, cmd/, internal/, targets/). Without -out the runner writes a fresh folder out/run-TIME (git-ignored) and ends by comparing it with the committed evidence/")
	o.Stores = protocol.Stores
	fs.Var(&value{s: "all", set: func(s string) (err error) {
		o.Stores, err = runner.ParseStores(s)
		o.PostgresAsked = s == string(protocol.Postgres)
		o.StoresGiven = true
		return err
	}}, "store", "the store to run every case on: volatile, durable, postgres, or all, which skips postgres where PostgreSQL is not installed; a plain run also runs the cases on every shipped target, -store runs none")
	fs.Var(&value{set: func(s string) error {
		if s == "" {
			return errors.New("want a shipped target's name or a folder")
		}
		o.Targets = append(o.Targets, s)
		return nil
	}}, "target", "run the cases on the target `NAME` (a folder of targets/) or in a folder holding target.json, and on no store unless -store is given too; repeat it for several targets (see docs/targets.md)")
	fs.StringVar(&o.Case, "case", "", "run only this case (a case file's `NAME`), or several as NAME,NAME,..., no experiment")
	fs.Var(&value{set: func(s string) (err error) {
		o.Experiment, err = runner.ParseExperiment(s)
		return err
	}}, "experiment", "run only this experiment, no case: retries (client designs on a flaky network, counted from the server's journal), jitter (the retry-storm model, drawn as jitter.svg) or chaos (clients under seeded faults and kill -9 on every selected store and target, judged from the recorded history); none runs the cases and no experiment (default: the cases, then every experiment)")
	fs.Var(&value{set: func(s string) (err error) {
		o.Unsafe, err = protocol.ParseFlaw(s)
		return err
	}}, "unsafe-registry", "a mutation run: the cases (no experiment) against servers with a deliberately broken registry, "+flawList()+"; the audit must FAIL and name the case that caught the bug")
	fs.StringVar(&o.ServerPath, "server", "", "use the effectserver binary at `PATH` (a regular file of at most "+strconv.Itoa(runner.MaxServerBytes>>20)+" MiB) instead of building one")
	fs.StringVar(&o.PostgresDSN, "pg-dsn", "", "run the postgres store on the existing server this `URL` names instead of a throwaway cluster the runner starts: its user must create databases (one per run, dropped after it; a later run drops those of a runner that died, see README); its password is never printed")
	fs.Uint64Var(&o.Seed, "seed", 1, "the retries and chaos experiments' seed")
	fs.StringVar(&o.SignKey, "sign", "", "also write the statement as a DSSE envelope signed with the ed25519 private key in `KEYFILE` (an OpenSSH key without a passphrase, or PKCS #8 PEM): it says who ran it, not that the run was honest (audit -verify-key checks it)")
	fs.StringVar(&o.JUnit, "junit", "", "once the audit passes, also write its verdicts as a JUnit XML report to `FILE` (outside the evidence folder): a testcase per case on each target and store (docs/ci.md)")
	fs.BoolVar(&o.Strict, "strict", false, "with -target, a limitation (a finding the target's claims excuse) fails the run too (exit 6), and fails its case in the -junit report")
	fs.IntVar(&o.Trials, "trials", runner.DefaultTrials, "run each case `N` times on each target, each on fresh state (keys and a sink journal of its own; a case that needs no process of its own shares one, docs/targets.md): a case's verdict there is the distribution of its trials' verdicts, a finding's rate with its Wilson 95 % interval, and a case whose trials disagree is racy (the committed evidence runs 10)")
	fs.Var(&value{set: func(s string) (err error) {
		o.Shard, err = shard.Parse(s)
		return err
	}}, "shard", "run slice `K/N` of the run's cells (each case on a store, each trial of a case on a target), 1 <= K <= N <= "+strconv.Itoa(shard.MaxN)+", and no experiment: N machines each run one slice of the same command, and audit -merge joins their folders into the whole run (docs/ci.md)")
	fs.IntVar(&o.Intents, "intents", runner.DefaultIntents, "intents per row")
	o.Retries = retries.Default
	fs.IntVar(&o.Retries.DropPercent, "drop-percent", retries.Default.DropPercent, "the chance, in %, that the client drops an attempt before sending it")
	fs.IntVar(&o.Retries.ClientTimeoutMS, "timeout-ms", retries.Default.ClientTimeoutMS, "the client's timeout per attempt, in ms")
	fs.IntVar(&o.Retries.MaxAttempts, "attempts", retries.Default.MaxAttempts, "attempts per intent for the retrying clients")
	fs.IntVar(&o.Retries.Workers, "workers", retries.Default.Workers, "intents in flight at once per row")
	fs.IntVar(&o.Retries.TotalDeadlineMS, "deadline-ms", retries.Default.TotalDeadlineMS, "the total deadline per intent, over all attempts and waits, in ms; 0: none")
	fs.DurationVar(&o.Chaos.Duration, "duration", chaos.Defaults.Duration, "the chaos phase per store, such as 3s or 2m, and per target when not "+chaos.Defaults.Duration.String()+" (a target's otherwise takes "+runner.DefaultTargetDuration.String()+"); a soak is a longer one")
	fs.IntVar(&o.Chaos.Clients, "clients", chaos.Defaults.Clients, "clients, each one intent at a time")
	fs.IntVar(&o.Chaos.Replicas, "replicas", chaos.Defaults.Replicas, "replicas (servers) per store, and per target that claims a shared store (one on any other)")
	fs.IntVar(&o.Chaos.Trials, "chaos-trials", runner.DefaultChaosTrials, "run chaos `N` times on each target, each on fresh state with the same seed: what a target does under chaos is a rule's rate over trials (a store runs once)")
	return fs
}

// flawList names the unsafe registries for the help.
func flawList() string {
	names := make([]string, len(protocol.Flaws))
	for i, f := range protocol.Flaws {
		names[i] = string(f)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// flagsHelp renders fs's flags under their groups' headings, with their
// ranges and defaults: the help cannot drift from what the flags do.
func flagsHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(g.title + "\n")
		b.WriteString(flaghelp.Flags(fs, g.flags, rangeNote))
	}
	return b.String()
}

// rangeNote is the range of f for the help, "" if it has none.
func rangeNote(f *flag.Flag) string {
	bd, ok := boundOf(f.Name)
	if !ok {
		return ""
	}
	_, isDur := f.Value.(flag.Getter).Get().(time.Duration)
	return bd.text(isDur)
}
