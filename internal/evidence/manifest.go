package evidence

import (
	"idemlab/internal/audit/shard"
	"maps"
	"runtime"
	"time"

	"idemlab/internal/caserun"
	"idemlab/internal/labbuild"
	"idemlab/internal/protocol"
)

// Names of the case suite's evidence files.
const (
	ResultsName = "results.json"
	RunName     = "run.json"
)

// GitCheckout is the checkout's commit and whether its sources were dirty.
type GitCheckout struct {
	Commit string
	Dirty  bool
}

// ManifestInput is what a manifest records besides the sources and files.
type ManifestInput struct {
	Root        string // the checkout, whose sources are hashed
	Git         GitCheckout
	Cases       []string
	Stores      []protocol.Store // stores the cases ran on; none without cases
	Experiments []string
	Protocol    caserun.Protocol
	ServerSHA   string          // SHA-256 of the server binary
	ServerBuild labbuild.Recipe // how it was made
	Postgres    string          // the version of the PostgreSQL the postgres store ran on, if it ran
	Unsafe      protocol.Flaw
	Targets     []TargetResult    // the targets the cases ran on
	Flags       map[string]string // the knobs set away from their defaults (Manifest.Flags); nil: none
	Shard       shard.Slice       // the slice of the run this folder holds; zero: the whole run
}

// NewManifest hashes in.Root's sources into a run's manifest; Write adds files.
func NewManifest(in ManifestInput) (Manifest, error) {
	sources, err := Sources(in.Root)
	if err != nil {
		return Manifest{}, err
	}
	sel := Selection{Cases: []string{}, Stores: []string{}, Targets: []string{}, Experiments: []string{}}
	targets := []ManifestTarget{}
	for _, t := range in.Targets {
		sel.Targets = append(sel.Targets, t.Target.Name)
		targets = append(targets, ManifestTarget{Name: t.Target.Name, Dir: t.Dir, Digest: t.Digest, Libraries: orEmpty(t.Libraries), Runtime: t.Runtime, Skipped: t.Skipped})
	}
	sel.Cases = append(sel.Cases, in.Cases...)
	sel.Experiments = append(sel.Experiments, in.Experiments...)
	for _, s := range in.Stores {
		sel.Stores = append(sel.Stores, string(s))
	}
	p := in.Protocol
	flags := maps.Clone(in.Flags)
	if flags == nil {
		flags = map[string]string{}
	}
	var slice *Shard
	if !in.Shard.Whole() {
		slice = &Shard{K: in.Shard.K, N: in.Shard.N}
	}
	return Manifest{
		SchemaVersion: 1,
		GeneratedUTC:  time.Now().UTC().Format("2006-01-02T15:04:05Z"),
		SourceCommit:  in.Git.Commit,
		SourceDirty:   in.Git.Dirty,
		GoVersion:     runtime.Version(),
		OSArch:        runtime.GOOS + "/" + runtime.GOARCH,
		ServerSHA256:  in.ServerSHA,
		ServerBuild:   &in.ServerBuild,
		Protocol: Protocol{
			KeyHeader:       protocol.KeyHeader,
			ReplayedHeader:  protocol.ReplayedHeader,
			FaultHeader:     protocol.FaultHeader,
			KeyPattern:      protocol.KeyPattern,
			DefaultBody:     protocol.DefaultBody,
			Capacity:        p.Capacity,
			MaxBody:         p.MaxBody,
			WaitMS:          p.Wait.Milliseconds(),
			SlowMS:          protocol.SlowDelay.Milliseconds(),
			CrashExitCode:   protocol.CrashExitCode,
			ClientTimeoutMS: p.ClientTimeout.Milliseconds(),
		},
		Selection:       sel,
		Flags:           flags,
		PostgresVersion: in.Postgres,
		UnsafeRegistry:  string(in.Unsafe),
		Shard:           slice,
		Targets:         targets,
		Sources:         sources,
	}, nil
}
