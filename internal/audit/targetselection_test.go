package audit

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The target fixture's three targets, in selection order: the checkout
// ships exactly these (targets/NAME/target.json).
const (
	tExpress     = "express-idempotency"
	tNodeMemory  = "node-idempotency-memory"
	tNodeRedis   = "node-idempotency-redis"
	expressSkip  = "node, npm not found (Debian's nodejs and npm packages)"
	expressIndex = 0
)

// dropTarget removes target name from the selection, the manifest's
// targets and targets.json, as a forger hiding a target would.
func dropTarget(t *testing.T, f *fixture, name string) {
	t.Helper()
	f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
		d["targets"] = slices.DeleteFunc(d["targets"].([]any), func(x any) bool { return x.(map[string]any)["name"] == name })
	})
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		sel := m["selection"].(map[string]any)
		sel["targets"] = slices.DeleteFunc(sel["targets"].([]any), func(x any) bool { return x == name })
		m["targets"] = slices.DeleteFunc(m["targets"].([]any), func(x any) bool { return x.(map[string]any)["name"] == name })
	})
}

// skipTarget records target i (name) as skipped for why, its runs and
// versions emptied, in targets.json and the manifest.
func skipTarget(t *testing.T, f *fixture, i int, name, why string) {
	t.Helper()
	f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
		tm := targetOf(d, name)
		tm["skipped"], tm["runs"], tm["libraries"], tm["runtime"] = why, []any{}, []any{}, ""
	})
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		mt := m["targets"].([]any)[i].(map[string]any)
		mt["skipped"], mt["libraries"], mt["runtime"] = why, []any{}, ""
	})
}

// Ensure a selection that leaves out a target the checkout ships is said
// in the PASS line's partial part, as a store left out is, and that a
// target from outside the checkout is named there too; a shipped target
// claimed to be from outside the checkout (dir "") is refused: it would
// turn off every re-read of its folder.
func TestTargetSelectionPartial(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string // exact failure lines; nil: pass
		subset []string // the report's Subset, with a pass
	}{
		{
			name:   "pass/every shipped target selected",
			mutate: func(t *testing.T, f *fixture) {},
			subset: []string{"stores: none (runs on targets only)", "experiments: none"},
		},
		{
			name:   "pass/a target dropped from the selection",
			mutate: func(t *testing.T, f *fixture) { dropTarget(t, f, tNodeMemory); f.rehashTargets(t) },
			subset: []string{"stores: none (runs on targets only)", "targets: " + tExpress + ", " + tNodeRedis + " only", "experiments: none"},
		},
		{
			name: "pass/a target from outside the checkout",
			mutate: func(t *testing.T, f *fixture) {
				const own = "own-service"
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
					tm := targetOf(d, tExpress)
					tm["name"], tm["dir"] = own, ""
					tm["target_json"] = strings.Replace(tm["target_json"].(string), `"name": "`+tExpress+`"`, `"name": "`+own+`"`, 1)
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"].(map[string]any)["targets"].([]any)[expressIndex] = own
					mt := m["targets"].([]any)[expressIndex].(map[string]any)
					mt["name"], mt["dir"] = own, ""
				})
				f.rehashTargets(t)
			},
			subset: []string{"stores: none (runs on targets only)", "targets: own-service, " + tNodeMemory + ", " + tNodeRedis + " only",
				"targets outside the checkout, not re-read: own-service", "experiments: none"},
		},
		{
			name: "a shipped target said to be from outside the checkout",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
					tm := targetOf(d, tExpress)
					tm["dir"] = ""
					tm["target_json"] = strings.Replace(tm["target_json"].(string), "README shows", "README says", 1)
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["targets"].([]any)[expressIndex].(map[string]any)["dir"] = ""
				})
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: dir: "" (a folder outside the checkout), but the checkout ships targets/express-idempotency/target.json: a shipped target is re-read from its folder, never taken on the runner's word`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFixture(t)
			if !strings.Contains(string(mustRead(t, f.path("evidence/targets.json"))), `"name": "`+tExpress+`"`) {
				t.Fatal("the fixture's targets changed: fix the constants")
			}
			tt.mutate(t, f)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), tt.want, "")
			if tt.want == nil && !slices.Equal(r.Subset, tt.subset) {
				t.Errorf("Subset = %q, want %q", r.Subset, tt.subset)
			}
		})
	}
}

// Ensure a skipped target carries a reason the audit can check: the
// runner's form, naming programs its target.json needs, none of which
// another run of the same evidence used; and that a skip is named in the
// PASS line's partial part.
func TestTargetSkipReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string
		subset string // with a pass, among the report's Subset
	}{
		{
			name: "pass/skipped for a program no other run used",
			mutate: func(t *testing.T, f *fixture) {
				skipTarget(t, f, 2, tNodeRedis, "redis-server not found (install Debian's redis-server package)")
			},
			subset: "target node-idempotency-redis skipped (redis-server not found (install Debian's redis-server package))",
		},
		{
			name:   "skipped for a program another target ran with",
			mutate: func(t *testing.T, f *fixture) { skipTarget(t, f, expressIndex, tExpress, expressSkip) },
			want: []string{
				`targets.json: target express-idempotency: skipped: "node, npm not found (Debian's nodejs and npm packages)", but target node-idempotency-memory in the same evidence ran with node: it was not missing on the runner's machine`,
			},
		},
		{
			name:   "skipped for no reason the runner gives",
			mutate: func(t *testing.T, f *fixture) { skipTarget(t, f, expressIndex, tExpress, "program not installed") },
			want: []string{
				`targets.json: target express-idempotency: skipped: "program not installed" is not a reason the runner gives: a target is skipped only for a program missing on the runner's machine, which the reason names ("P, Q not found (what to install)", "PostgreSQL not at hand (...)")`,
			},
		},
		{
			name: "skipped for a program its target.json does not need",
			mutate: func(t *testing.T, f *fixture) {
				skipTarget(t, f, expressIndex, tExpress, "PostgreSQL not at hand (install Debian's postgresql package)")
			},
			want: []string{
				`targets.json: target express-idempotency: skipped: "PostgreSQL not at hand (install Debian's postgresql package)" names PostgreSQL, which the target's target.json does not need (it needs node, npm): the skip is not the runner's`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFixture(t)
			tt.mutate(t, f)
			f.rehashTargets(t)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), tt.want, "")
			if tt.want == nil && !slices.Contains(r.Subset, tt.subset) {
				t.Errorf("Subset = %q, want %q among them", r.Subset, tt.subset)
			}
		})
	}
}

// Ensure the PASS output's not-checked list names the versions no check
// re-reads: Go's and the OS's, and each target's runtime.
func TestVersionsNotChecked(t *testing.T) {
	t.Parallel()
	r, _ := auditText(t, newTargetFixture(t))
	want := "the versions recorded: Go's and the OS's (manifest.json go_version, os_arch); the runtime targets.json records for " +
		tExpress + ", " + tNodeMemory + ", " + tNodeRedis + ": the runner's word, checked for their form at most, not re-read"
	if !slices.ContainsFunc(r.NotChecked, func(c Claim) bool { return c.Text == want }) {
		t.Errorf("NotChecked = %q, want %q among them", r.NotChecked, want)
	}
}

// Ensure a chaos run on a target skipped for a program that another chaos
// run (or a run on targets) of the same evidence used fails, as a skipped
// target does, and that one no run contradicts passes; either way the
// skip is named in the PASS line's partial part.
func TestChaosSkipReason(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f := &fixture{root: root}
	f.write(t, "targets/a/target.json", `{"name": "a", "requires": ["node", "npm"]}`)
	f.write(t, "targets/b/target.json", `{"name": "b", "requires": ["node", "npm"], "services": ["redis"]}`)
	chaos := func(bWhy string) []byte {
		return []byte(`{"runs": [
			{"store": "postgres", "target": "", "target_dir": "", "not_run": ""},
			{"store": "", "target": "a", "target_dir": "targets/a", "not_run": ""},
			{"store": "", "target": "b", "target_dir": "targets/b", "not_run": ` + strconv.Quote(bWhy) + `}]}`)
	}
	for _, tt := range []struct {
		why  string
		want []string
	}{
		{"skipped: redis-server not found (install Debian's redis-server package)", nil},
		{"skipped: node, npm not found (Debian's nodejs and npm packages)", []string{
			`chaos.json: target b: not_run: "node, npm not found (Debian's nodejs and npm packages)", but the chaos run on target a in the same evidence ran with node: it was not missing on the runner's machine`}},
		{"skipped: PostgreSQL not at hand (install Debian's postgresql package)", []string{
			`chaos.json: target b: not_run: "PostgreSQL not at hand (install Debian's postgresql package)" names PostgreSQL, which the target's target.json does not need (it needs node, npm, redis-server): the skip is not the runner's`}},
		{"skipped: no time", []string{
			`chaos.json: target b: not_run: "no time" is not a reason the runner gives: a target is skipped only for a program missing on the runner's machine, which the reason names ("P, Q not found (what to install)", "PostgreSQL not at hand (...)")`}},
	} {
		a := &auditor{opts: Options{Root: root}, data: map[string][]byte{ChaosFile: chaos(tt.why)}, report: &Report{}}
		a.checkSkips()
		if got := messages(a.report); !slices.Equal(got, tt.want) {
			t.Errorf("not_run %q: failures\n%s\nwant\n%s", tt.why, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
		if subset := "chaos on target b skipped (" + strings.TrimPrefix(tt.why, "skipped: ") + ")"; !slices.Contains(a.report.Subset, subset) {
			t.Errorf("not_run %q: Subset = %q, want %q among them", tt.why, a.report.Subset, subset)
		}
	}
}
