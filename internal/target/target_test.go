package target

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/sink"
)

func schemas(t *testing.T) *strict.Schemas {
	t.Helper()
	s, err := strict.LoadSchemas(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// minimal is a valid target.json; cases edit it.
const minimal = `{
  "name": "tiny",
  "summary": "a tiny service",
  "start": {"argv": ["./tiny", "-port", "{port}"], "env": {"EFFECT_URL": "{effect_url}", "STATE": "{state}/r{replica}"}, "ready": {"tcp": true}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"},
  "replay": {"header": "X-Replayed", "value": "yes"},
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}`

// startLine is minimal's start, which an attached target replaces.
const startLine = `  "start": {"argv": ["./tiny", "-port", "{port}"], "env": {"EFFECT_URL": "{effect_url}", "STATE": "{state}/r{replica}"}, "ready": {"tcp": true}},`

// Ensure target.json is refused, naming what was wrong, wherever the schema
// or a rule the schema cannot state is broken.
func TestParse(t *testing.T) {
	set := schemas(t)
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"valid", "", "", ""},
		{"unknown field", `"summary"`, `"colour": "red", "summary"`, "colour"},
		{"two ready rules", `{"tcp": true}`, `{"tcp": true, "http": "/"}`, "exactly one of stdout, tcp, http"},
		{"bad regexp", `{"tcp": true}`, `{"stdout": "READY ("}`, "start.ready.stdout"},
		{"two groups", `{"tcp": true}`, `{"stdout": "(a)(b)"}`, "at most one group"},
		{"unknown placeholder", `{state}/r{replica}`, `{home}`, "unknown placeholder {home}"},
		{"service placeholder without the service", `{state}/r{replica}`, `{redis_url}`, "unknown placeholder {redis_url}"},
		{"never told a port", `"-port", "{port}"`, `"-quiet"`, "never told {port}"},
		{"port from line and a probe", `"ready": {"tcp": true}`, `"ready": {"stdout": "on (\\d+)"}`, ""},
		{"unknown native fault", `"effects": "sink"`, `"effects": "sink", "faults": {"native": {"crash-sometimes": {"header": "X", "value": "1"}}}`, `"crash-sometimes" is not a lab fault`},
		{"count with port", `"effects": "sink"`, `"effects": {"count": ["cat", "{port}"]}`, "{port} means nothing"},
		{"journal with port", `"effects": "sink"`, `"effects": {"count": ["cat"], "journal": ["cat", "{port}"]}`, "{port} means nothing"},
		{"journal with unknown placeholder", `"effects": "sink"`, `"effects": {"count": ["cat"], "journal": ["cat", "{home}"]}`, "effects.journal[1]: unknown placeholder {home}"},
		{"journal and capacity", `"effects": "sink"`, `"effects": {"count": ["cat", "{capacity}"], "journal": ["cat", "{state}"]}`, ""},
		{"journal without count", `"effects": "sink"`, `"effects": {"journal": ["cat"]}`, "effects"},
		{"packages without lock", `"effects": "sink"`, `"effects": "sink", "versions": {"packages": ["express"]}`, "'lock' is required, if 'packages'"},
		{"bad name", `"tiny"`, `"Tiny"`, "/name"},
		{"missing claims", `"claims"`, `"claimz"`, "claims"},
		{"attached", startLine, `"attach": {"url": "http://127.0.0.1:8080", "sink_addr": "127.0.0.1:9090"},`, ""},
		{"attached on another host", startLine, `"attach": {"url": "http://staging.internal:443", "sink_addr": "127.0.0.1:9090"},`, "/attach/url"},
		{"attached on ::1", startLine, `"attach": {"url": "http://[::1]:8080", "sink_addr": "127.0.0.1:9090"},`, ""},
		{"attached and started", `"request"`, `"attach": {"url": "http://127.0.0.1:8080", "sink_addr": "127.0.0.1:9090"}, "request"`, "valid against schemas at indexes 0 and 1"},
		{"attached, no port", startLine, `"attach": {"url": "http://127.0.0.1", "sink_addr": "127.0.0.1:9090"},`, "/attach/url"},
		{"attached, port 0", startLine, `"attach": {"url": "http://127.0.0.1:0", "sink_addr": "127.0.0.1:9090"},`, "attach.url: port 0: want 1..65535"},
		{"attached, sink port too big", startLine, `"attach": {"url": "http://127.0.0.1:80", "sink_addr": "127.0.0.1:70000"},`, "attach.sink_addr: port 70000"},
		{"attached, sink elsewhere", startLine, `"attach": {"url": "http://127.0.0.1:80", "sink_addr": "10.0.0.1:9090"},`, "/attach/sink_addr"},
		{"attached with setup", startLine, `"attach": {"url": "http://127.0.0.1:80", "sink_addr": "127.0.0.1:9090"}, "setup": ["make"],`, "attach: an attached service is set up and started by its user"},
		{"attached, counting itself", minimal[strings.Index(minimal, `  "start"`):strings.Index(minimal, `  "claims"`)],
			`"attach": {"url": "http://127.0.0.1:80", "sink_addr": "127.0.0.1:9090"}, "request": {"path": "/pay", "key_header": "K"}, "replay": null, "effects": {"count": ["cat"]},`, "attach: an attached service performs its effects at the lab's sink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(minimal, tc.old, tc.new, 1)
			if strings.Contains(tc.new, `"count"`) {
				src = strings.Replace(src, `"EFFECT_URL": "{effect_url}", `, "", 1) // no sink: no sink's URL
			}
			_, err := Parse("targets/tiny/target.json", []byte(src), set)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), "targets/tiny/target.json: "):
				t.Fatalf("Parse error = %v, want it to name the file", err)
			}
		})
	}
}

// Ensure Load wants the folder's name to be the target's.
func TestLoadNameIsFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "other")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, FileName), minimal)
	if _, err := Load(dir, schemas(t)); err == nil || !strings.Contains(err.Error(), `want the folder's name "other"`) {
		t.Fatalf("Load = %v, want a name mismatch", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadMinimal(t *testing.T, edit func(string) string) *Target {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	src := minimal
	if edit != nil {
		src = edit(src)
	}
	writeFile(t, filepath.Join(dir, FileName), src)
	tg, err := Load(dir, schemas(t))
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// Ensure each lab fault lands where docs/targets.md says, native mappings
// win, and a fault that cannot act on the target says why.
func TestPlace(t *testing.T) {
	sinkTarget := loadMinimal(t, nil)
	native := loadMinimal(t, func(s string) string {
		s = strings.Replace(s, `"EFFECT_URL": "{effect_url}", `, "", 1)
		return strings.Replace(s, `"effects": "sink"`, `"effects": {"count": ["cat", "{state}/n"]}, "faults": {"native": {"crash-after-effect": {"header": "X-Crash", "value": "after"}}}`, 1)
	})
	passthrough := loadMinimal(t, func(s string) string {
		return strings.Replace(s, `"effects": "sink"`, `"effects": "sink", "faults": {"native": {"*": {"header": "X-Lab-Fault", "value": "{fault}"}}}`, 1)
	})
	for _, tc := range []struct {
		name  string
		tg    *Target
		fault string
		want  Placement
		err   string
	}{
		{"none", sinkTarget, "", Placement{}, ""},
		{"drop-reply on the proxy", sinkTarget, "drop-reply", Placement{DropReply: true}, ""},
		{"crash-after-record holds and kills", sinkTarget, "crash-after-record", Placement{HoldAndKill: true}, ""},
		{"slow stalls the sink first", sinkTarget, "slow", Placement{Sink: &sink.Action{Before: 120 * time.Millisecond, Apply: true, End: sink.Answer}}, ""},
		{"stall after applying", sinkTarget, "stall=800ms", Placement{Sink: &sink.Action{Apply: true, After: 800 * time.Millisecond, End: sink.Answer}}, ""},
		{"crash before the effect", sinkTarget, "crash-before-effect", Placement{Sink: &sink.Action{End: sink.Kill}}, ""},
		{"the crash gap", sinkTarget, "crash-after-effect", Placement{Sink: &sink.Action{Apply: true, End: sink.Kill}}, ""},
		{"stall then the crash gap", sinkTarget, "stall=2000ms,crash-after-effect", Placement{Sink: &sink.Action{Apply: true, After: 2 * time.Second, End: sink.Kill}}, ""},
		{"a failed effect", sinkTarget, "fail-effect", Placement{Sink: &sink.Action{End: sink.Fail}}, ""},
		{"failed after the effect", sinkTarget, "fail-after-effect", Placement{Sink: &sink.Action{Apply: true, End: sink.Fail}}, ""},
		{"the proxy gives up in flight", sinkTarget, "give-up=40ms", Placement{GiveUp: 40 * time.Millisecond}, ""},
		{"give-up takes a time", sinkTarget, "give-up", Placement{}, "want NNms"},
		{"a crash after the claim: the sink kills on receipt", sinkTarget, "crash-after-claim", Placement{Sink: &sink.Action{End: sink.Kill}}, ""},
		{"a crash after the downstream is the crash gap", sinkTarget, "crash-after-downstream", Placement{Sink: &sink.Action{Apply: true, End: sink.Kill}}, ""},
		{"the ledger's reply dropped", sinkTarget, "drop-downstream-reply", Placement{Sink: &sink.Action{Apply: true, End: sink.Drop}}, ""},
		{"a downstream fault without a sink", native, "drop-downstream-reply", Placement{}, "counts its effects itself"},
		{"unknown", sinkTarget, "dorp-reply", Placement{}, `"dorp-reply": unknown`},
		{"bad argument", sinkTarget, "delay=fast", Placement{}, "want NNms"},
		{"native header", native, "crash-after-effect", Placement{Header: map[string][]string{"X-Crash": {"after"}}}, ""},
		{"sink fault without a sink", native, "slow", Placement{}, "counts its effects itself"},
		{"proxy fault without a sink", native, "drop-reply", Placement{DropReply: true}, ""},
		{"every fault passed through", passthrough, "stall=2000ms,crash-after-effect", Placement{Header: map[string][]string{"X-Lab-Fault": {"stall=2000ms,crash-after-effect"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.tg.Place(tc.fault)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Place(%q) error = %v, want one containing %q", tc.fault, err, tc.err)
				}
				if strings.Contains(tc.err, "itself") {
					if !errors.Is(err, ErrNotPlaceable) {
						t.Fatalf("Place(%q) error = %v, want ErrNotPlaceable", tc.fault, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, w := render(got), render(tc.want); g != w {
				t.Fatalf("Place(%q) = %s, want %s", tc.fault, g, w)
			}
		})
	}
}

func render(p Placement) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p.Header)) {
		b.WriteString(k + "=" + strings.Join(p.Header[k], ",") + " ")
	}
	if p.Sink != nil {
		b.WriteString("sink:" + p.Sink.Before.String() + "/" + map[bool]string{true: "apply", false: "no"}[p.Sink.Apply] + "/" + p.Sink.After.String() + "/" + p.Sink.End.String() + " ")
	}
	if p.DropReply {
		b.WriteString("drop ")
	}
	if p.HoldAndKill {
		b.WriteString("hold+kill ")
	}
	if p.GiveUp > 0 {
		b.WriteString("give-up:" + p.GiveUp.String() + " ")
	}
	return b.String()
}

// Ensure the start command's placeholders are filled and the process sees
// exactly the environment target.json names, plus the inherited variables
// the runner has.
func TestCommand(t *testing.T) {
	tg := loadMinimal(t, nil)
	t.Setenv("SECRET_OF_THE_RUNNER", "x")
	for _, k := range inherited {
		t.Setenv(k, "runner's "+k)
	}
	argv, env := tg.Command(Vars{Port: 4242, State: "/s", Replica: 1, EffectURL: "http://127.0.0.1:9/effect/1"})
	if got, want := strings.Join(argv, " "), filepath.Join(tg.Dir, "tiny")+" -port 4242"; got != want {
		t.Fatalf("argv = %q, want %q", got, want)
	}
	want := []string{"PATH=runner's PATH", "HOME=runner's HOME", "TMPDIR=runner's TMPDIR", "LANG=runner's LANG", "EFFECT_URL=http://127.0.0.1:9/effect/1", "STATE=/s/r1"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
}

// Ensure docs/targets.md names exactly the variables a target inherits.
func TestInheritedDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "targets.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(doc), "copied from the runner's environment")
	para, _, _ := strings.Cut(after, "\n\n")
	para, _, _ = strings.Cut(para, ". ")
	var named []string
	for _, m := range regexp.MustCompile("`([A-Z_]+)`").FindAllStringSubmatch(para, -1) {
		named = append(named, m[1])
	}
	if !slices.Equal(named, inherited) {
		t.Errorf("docs/targets.md: the variables copied from the runner's environment are %q, want %q (target.inherited)", named, inherited)
	}
	_, after, _ = strings.Cut(string(doc), "what go and npm need to build")
	para, _, _ = strings.Cut(after, ". ")
	named = nil
	for _, m := range regexp.MustCompile("`([A-Za-z_]+)`").FindAllStringSubmatch(para, -1) {
		named = append(named, m[1])
	}
	if !slices.Equal(named, toolInherited) {
		t.Errorf("docs/targets.md: the variables the other commands get besides are %q, want %q (target.toolInherited)", named, toolInherited)
	}
}

// Ensure setup runs once per folder content: a second run on the same
// files does nothing, an edit makes it run again, and so does the loss of
// what it made; what setup writes
// (node_modules, a binary the target's .gitignore names) is not part of
// the digest; and the lab leaves no file of its own in the folder, removing
// an earlier lab's marker.
func TestEnsureSetupCachedByDigest(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tg := loadMinimal(t, func(s string) string {
		return strings.Replace(s, `"start"`, `"setup": ["sh", "-c", "mkdir -p node_modules && echo run >> node_modules/runs && date +%N > tiny"], "start"`, 1)
	})
	writeFile(t, filepath.Join(tg.Dir, ".gitignore"), "/tiny\n")
	writeFile(t, filepath.Join(tg.Dir, SetupMarker), "an earlier lab's\n")
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(tg.Dir, "node_modules", "runs"))
		return strings.Count(string(b), "run")
	}
	setup := func() {
		t.Helper()
		d, err := tg.Digest()
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		if err := tg.EnsureSetup(context.Background(), d, &log); err != nil {
			t.Fatal(err)
		}
	}
	setup()
	setup()
	if got := runs(); got != 1 {
		t.Fatalf("setup ran %d times on unchanged files, want 1", got)
	}
	entries, err := os.ReadDir(tg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".gitignore", "node_modules", "target.json", "tiny"}; !slices.Equal(names, want) {
		t.Errorf("the folder after setup holds %q, want %q: nothing of the lab's", names, want)
	}
	writeFile(t, filepath.Join(tg.Dir, "app.js"), "changed")
	setup()
	if got := runs(); got != 2 {
		t.Fatalf("setup ran %d times after an edit, want 2", got)
	}
	// What setup made is gone (a fresh clone at the same path, the same
	// sources): the record of the last setup does not hold.
	if err := os.Remove(filepath.Join(tg.Dir, "tiny")); err != nil {
		t.Fatal(err)
	}
	setup()
	if got := runs(); got != 3 {
		t.Fatalf("setup ran %d times after its product was removed, want 3", got)
	}
	setup()
	if got := runs(); got != 3 {
		t.Fatalf("setup ran %d times on a folder as it left it, want 3", got)
	}
}

// Ensure the runtime's version is the first line a command printed on
// stdout, or on stderr where stdout is empty (java -version), and a
// failing command says what it printed.
func TestRuntimeVersion(t *testing.T) {
	tests := []struct{ script, want, wantErr string }{
		{script: "echo 'go version go1.26.8'; echo more", want: "go version go1.26.8"},
		{script: "echo 'openjdk version \"17.0.2\"' >&2; echo more >&2", want: `openjdk version "17.0.2"`},
		{script: "echo warning >&2; echo v22.1.0", want: "v22.1.0"},
		{script: "true", wantErr: "target tiny: runtime version: no output"},
		{script: "echo no such runtime >&2; exit 3", wantErr: "target tiny: runtime version sh -c echo no such runtime >&2; exit 3: exit status 3: no such runtime"},
	}
	for _, tt := range tests {
		tg := loadMinimal(t, nil)
		tg.Versions.Runtime = []string{"sh", "-c", tt.script}
		got, err := tg.RuntimeVersion(context.Background())
		if got != tt.want || fmt.Sprint(err) != cmp.Or(tt.wantErr, "<nil>") {
			t.Errorf("RuntimeVersion(%q) = %q, %v; want %q, %s", tt.script, got, err, tt.want, cmp.Or(tt.wantErr, "no error"))
		}
	}
}

// Ensure a failing setup says which command failed and what it printed,
// and is not recorded: after it, even the contents of an earlier success
// (which it may have half undone) are set up again.
func TestEnsureSetupFailure(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tg := loadMinimal(t, func(s string) string {
		return strings.Replace(s, `"start"`, `"setup": ["sh", "-c", "echo run >> runs; if [ -e broken ]; then echo no registry; exit 3; fi"], "start"`, 1)
	})
	writeFile(t, filepath.Join(tg.Dir, ".gitignore"), "runs\n")
	setup := func() error {
		d, err := tg.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return tg.EnsureSetup(context.Background(), d, &bytes.Buffer{})
	}
	if err := setup(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(tg.Dir, "broken"), "")
	err := setup()
	if err == nil || !strings.Contains(err.Error(), "no registry") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("EnsureSetup = %v, want the command's failure and output", err)
	}
	if err := os.Remove(filepath.Join(tg.Dir, "broken")); err != nil {
		t.Fatal(err)
	}
	if err := setup(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tg.Dir, "runs")); strings.Count(string(b), "run") != 3 {
		t.Errorf("setup ran %d times (success, failure, the first contents again), want 3", strings.Count(string(b), "run"))
	}
}

// Ensure every shipped target and zoo member loads, and its lock file pins
// the packages it names (the Fiber targets' go.mod).
func TestShippedTargets(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "*", "*", FileName))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("found %d target.json files (%v), want the shipped ones", len(dirs), err)
	}
	for _, p := range dirs {
		tg, err := Load(filepath.Dir(p), schemas(t))
		if err != nil {
			t.Error(err)
			continue
		}
		if libs, err := tg.Libraries(); err != nil || len(libs) != len(tg.Versions.Packages) {
			t.Errorf("%s: Libraries() = %v, %v", tg.Name, libs, err)
		} else if len(libs) > 0 {
			t.Logf("%s: %v", tg.Name, libs)
		}
	}
}
