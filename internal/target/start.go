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

// toolInherited are the variables of the runner's environment that the
// other commands a target names (setup, versions.runtime, effects.count,
// effects.journal) see besides inherited and what start.env names: the
// locale, and what go and npm need to build from the runner's caches and
// settings (a build cache, a module cache, a proxy setting, the CA files a
// registry's certificate is checked against). Nothing else of the runner's
// environment reaches them: not a token, not a password (issue 27). Proxy
// variables (HTTP_PROXY, ...) are left out, as they may carry credentials.
var toolInherited = []string{
	"LC_ALL", "LC_CTYPE",
	"XDG_CACHE_HOME", "XDG_CONFIG_HOME",
	"GOCACHE", "GOPATH", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE",
	"npm_config_cache", "NPM_CONFIG_CACHE",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
}

// ToolEnv returns the whole environment of a command a target names other
// than start, after a run (effects.count, effects.journal): inherited and
// toolInherited as the runner has them, start.env expanded on top.
func (t *Target) ToolEnv(v Vars) []string {
	return t.toolEnv(func(val string) (string, bool) { return t.expand(val, v), true })
}

// SetupEnv returns the whole environment of setup and versions.runtime,
// which run before any run: as ToolEnv, but start.env's members only where
// they name no placeholder but {dir} (a port or a state folder has no
// value yet).
func (t *Target) SetupEnv() []string {
	return t.toolEnv(func(val string) (string, bool) {
		val = strings.ReplaceAll(val, DirPlaceholder, t.Dir)
		return val, !slices.ContainsFunc(t.placeholders(), func(p string) bool { return strings.Contains(val, p) })
	})
}

func (t *Target) toolEnv(value func(string) (string, bool)) []string {
	var env []string
	for _, k := range append(slices.Clone(inherited), toolInherited...) {
		if val, ok := os.LookupEnv(k); ok && t.Start.Env[k] == "" {
			env = append(env, k+"="+val)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.Start.Env)) {
		if val, ok := value(t.Start.Env[k]); ok {
			env = append(env, k+"="+val)
		}
	}
	return env
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
