package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A claim of findings.md rests on one verdict, written beside it as
//
//	<!-- check: TARGET CASE SAFETY [RULE,RULE...] [racy|steady] -->
//	<!-- check-chaos: TARGET RULE K/N -->
//
// the first: CASE on TARGET has this safety verdict (the worst of its
// trials) and its example trial shows exactly these safety rules (none for
// a pass); with racy its trials disagree, with steady they agree (a cell
// near a rate of 0 or 1 may be either from one regeneration to the next:
// it says neither); the second: RULE fired in K of TARGET's N chaos
// trials.
var (
	checkRE      = regexp.MustCompile(`<!-- check: (\S+) (\S+) (pass|violation|limitation)(?: ([a-z_]+(?:,[a-z_]+)*))?(?: (racy|steady))? -->`)
	checkChaosRE = regexp.MustCompile(`<!-- check-chaos: (\S+) (\S+) ([0-9]+/[0-9]+) -->`)
	anyCheckRE   = regexp.MustCompile(`<!-- check[^>]*-->`)
)

// verdicts is the part of evidence/verdicts.json a claim reads.
type verdicts struct {
	Targets []struct {
		Target string `json:"target"`
		Runs   []struct {
			Case     string `json:"case"`
			NotRun   string `json:"not_run"`
			Safety   string `json:"safety"`
			Racy     bool   `json:"racy"`
			Findings []struct {
				Rule string `json:"rule"`
			} `json:"findings"`
		} `json:"runs"`
	} `json:"targets"`
	Chaos []struct {
		Target string `json:"target"`
		Rules  []struct {
			Rule  string `json:"rule"`
			Count int64  `json:"count"`
		} `json:"rules"`
	} `json:"chaos"`
}

// Ensure every claim of findings.md and the README holds in the committed
// evidence, and that findings.md claims something of every third-party
// target shipped.
func TestFindingsAgainstEvidence(t *testing.T) {
	page, err := os.ReadFile("findings.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("..", "evidence", "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v verdicts
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("verdicts.json: %v", err)
	}
	claimed := map[string]bool{}
	for _, m := range anyCheckRE.FindAll(page, -1) {
		if !checkRE.Match(m) && !checkChaosRE.Match(m) {
			t.Errorf("findings.md: malformed claim %s", m)
		}
	}
	for _, m := range checkRE.FindAllSubmatch(page, -1) {
		target, cs, safety, rules := string(m[1]), string(m[2]), string(m[3]), string(m[4])
		claimed[target] = true
		if err := v.holds(target, cs, safety, rules, string(m[5])); err != nil {
			t.Errorf("findings.md: %s: %v", m[0], err)
		}
	}
	// The README's few lines per library rest on verdicts too.
	if len(checkRE.FindAll(readme, -1)) == 0 {
		t.Error("README.md: its findings carry no claim to check")
	}
	for _, m := range checkRE.FindAllSubmatch(readme, -1) {
		if err := v.holds(string(m[1]), string(m[2]), string(m[3]), string(m[4]), string(m[5])); err != nil {
			t.Errorf("README.md: %s: %v", m[0], err)
		}
	}
	for _, m := range checkChaosRE.FindAllSubmatch(page, -1) {
		claimed[string(m[1])] = true
		if err := v.chaosHolds(string(m[1]), string(m[2]), string(m[3])); err != nil {
			t.Errorf("findings.md: %s: %v", m[0], err)
		}
	}
	for _, tv := range v.Targets {
		if !strings.HasPrefix(tv.Target, "effectserver-") && !claimed[tv.Target] {
			t.Errorf("findings.md claims nothing about target %s", tv.Target)
		}
	}
}

// holds checks one case claim.
func (v verdicts) holds(target, cs, safety, rules, racy string) error {
	for _, tv := range v.Targets {
		if tv.Target != target {
			continue
		}
		for _, r := range tv.Runs {
			if r.Case != cs {
				continue
			}
			if r.NotRun != "" {
				return fmt.Errorf("not run: %s", r.NotRun)
			}
			var got []string
			for _, f := range r.Findings {
				if !slices.Contains(got, f.Rule) {
					got = append(got, f.Rule)
				}
			}
			want := []string{}
			if rules != "" {
				want = strings.Split(rules, ",")
			}
			slices.Sort(got)
			slices.Sort(want)
			if r.Safety != safety || !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				return fmt.Errorf("the evidence says %s %v", r.Safety, got)
			}
			if racy != "" && r.Racy != (racy == "racy") {
				return fmt.Errorf("the evidence says racy %v: its trials %s", r.Racy, map[bool]string{true: "disagree", false: "agree"}[r.Racy])
			}
			return nil
		}
		return fmt.Errorf("no run of case %s", cs)
	}
	return fmt.Errorf("no target %s", target)
}

// chaosHolds checks one chaos claim.
func (v verdicts) chaosHolds(target, rule, rate string) error {
	trials, shown := 0, 0
	for _, c := range v.Chaos {
		if c.Target != target {
			continue
		}
		trials++
		for _, r := range c.Rules {
			if r.Rule == rule && r.Count > 0 {
				shown++
			}
		}
	}
	switch got := fmt.Sprintf("%d/%d", shown, trials); {
	case trials == 0:
		return fmt.Errorf("no chaos run on target %s", target)
	case got != rate:
		return fmt.Errorf("%s in %s chaos trials, the page says %s", rule, got, rate)
	}
	return nil
}
