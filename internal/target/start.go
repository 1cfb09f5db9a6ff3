package target

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The placeholders the lab fills in start.argv, start.env and effects.
const (
	PortPlaceholder         = "{port}"
	StatePlaceholder        = "{state}"
	ReplicaPlaceholder      = "{replica}"
	EffectURLPlaceholder    = "{effect_url}"
	DirPlaceholder          = "{dir}"
	EffectServerPlaceholder = "{effectserver}"
	RedisURLPlaceholder     = "{redis_url}"
	PostgresDSNPlaceholder  = "{postgres_dsn}"
	// CapacityPlaceholder is the capacity the lab gives its own server for
	// the same run: the case's, or chaos's intents at most.
	CapacityPlaceholder = "{capacity}"
)

var placeholderRE = regexp.MustCompile(`\{[a-z_]+\}`)

// placeholders are the ones t may use (a service's, with the service).
func (t *Target) placeholders() []string {
	p := []string{PortPlaceholder, StatePlaceholder, ReplicaPlaceholder, EffectURLPlaceholder, DirPlaceholder, EffectServerPlaceholder, CapacityPlaceholder}
	for _, s := range t.Services {
		switch s {
		case Redis:
			p = append(p, RedisURLPlaceholder)
		case Postgres:
			p = append(p, PostgresDSNPlaceholder)
		}
	}
	return p
}

// Vars are the values of the placeholders for one process of a run.
type Vars struct {
	Port         int
	State        string
	Replica      int
	EffectURL    string
	EffectServer string
	RedisURL     string
	PostgresDSN  string
	Capacity     int
}

func (t *Target) expand(s string, v Vars) string {
	return strings.NewReplacer(
		PortPlaceholder, strconv.Itoa(v.Port),
		StatePlaceholder, v.State,
		ReplicaPlaceholder, strconv.Itoa(v.Replica),
		EffectURLPlaceholder, v.EffectURL,
		DirPlaceholder, t.Dir,
		EffectServerPlaceholder, v.EffectServer,
		RedisURLPlaceholder, v.RedisURL,
		PostgresDSNPlaceholder, v.PostgresDSN,
		CapacityPlaceholder, strconv.Itoa(v.Capacity),
	).Replace(s)
}

// inherited are the only variables of the runner's environment a target
// process sees besides those target.json names.
var inherited = []string{"PATH", "HOME", "TMPDIR", "LANG"}

// Command returns the argv and the whole environment of one replica's
// process: start.env expanded, on top of the inherited variables.
func (t *Target) Command(v Vars) (argv, env []string) {
	argv = t.expandAll(t.Start.Argv, v)
	for _, k := range inherited {
		if val, ok := os.LookupEnv(k); ok && t.Start.Env[k] == "" {
			env = append(env, k+"="+val)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.Start.Env)) {
		env = append(env, k+"="+t.expand(t.Start.Env[k], v))
	}
	return argv, env
}

// CountCommand returns effects.count expanded, or nil for a sink target.
func (t *Target) CountCommand(v Vars) []string { return t.expandAll(t.Effects.Count, v) }

// JournalCommand returns effects.journal expanded, or nil where there is none.
func (t *Target) JournalCommand(v Vars) []string { return t.expandAll(t.Effects.Journal, v) }

// expandAll expands a command: a program given by a relative path is the
// target folder's.
func (t *Target) expandAll(args []string, v Vars) []string {
	var argv []string
	for _, a := range args {
		argv = append(argv, t.expand(a, v))
	}
	if len(argv) > 0 && strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		argv[0] = filepath.Join(t.Dir, argv[0])
	}
	return argv
}
