package audit

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit/strict"
)

// Ensure every line the runner writes but the place lines is read in
// place, without allocating, and to the members decodeJSON reads.
func TestFlatLine(t *testing.T) {
	lines := []string{
		okAttempt(3, 1, 7, 10, 20, false),
		`{"kind":"attempt","intent":4,"key":"chaos-4","body_sha256":"` + bodySHA(4) + `","replica":0,"attempt":0,"phase":"chaos","start_us":30,"end_us":35,"fault":"drop-reply","type":"info","outcome":"no_reply","status":0,"value":"","replayed":null,"error":"EOF"}`,
		`{"kind":"attempt","intent":5,"key":"chaos-5","body_sha256":"` + bodySHA(5) + `","replica":1,"attempt":2,"phase":"quiet","start_us":40,"end_us":50,"fault":"delay=5ms,drop-reply","type":"info","outcome":"no_reply","status":0,"value":"","replayed":null,"error":"Post \"http://x/effect\": EOF"}`,
		`{"kind":"exit","replica":0,"at_us":118252,"pid":20825,"addr":"127.0.0.1:34717","exit_code":23,"error":""}`,
		`{"kind":"effect","place":0,"value":1,"body_sha256":"` + bodySHA(1) + `"}`,
		" {\t\"kind\" : \"kill\" , \"replica\":0,\"at_us\":1,\"pid\":1,\"addr\":\"\",\"exit_code\":-1,\"error\":\"\"}  ",
	}
	for _, line := range lines {
		var l lineReader
		data := []byte(line + "\n")
		if !l.flat.Read(data) && !strings.Contains(line, `\"`) {
			t.Errorf("not read in place: %s", line)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := l.read(1, data); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 && l.obj == nil {
			t.Errorf("%d allocations a read of %s", int(allocs), line)
		}
		sameMembers(t, data)
	}
}

// sameMembers checks that a line flatLine reads holds the members decodeJSON
// reads, each with its value.
func sameMembers(t *testing.T, data []byte) {
	t.Helper()
	var f strict.Flat
	if !f.Read(data) {
		return
	}
	v, err := decodeJSON(data, capLineJSON)
	obj, _ := v.(map[string]any)
	if err != nil || obj == nil {
		t.Fatalf("flatLine read %q, decodeJSON refuses it: %v", data, err)
	}
	l := lineReader{obj: obj}
	if len(f.Members) != len(obj) {
		t.Fatalf("flatLine read %d members of %q, decodeJSON %d", len(f.Members), data, len(obj))
	}
	for _, m := range f.Members {
		if want := l.get(string(m.Name)); m.Kind != want.kind || !bytes.Equal(m.Text, want.text) {
			t.Fatalf("%q: member %q: flatLine reads %c %q, decodeJSON %c %q", data, m.Name, m.Kind, m.Text, want.kind, want.text)
		}
	}
}

// Ensure flatLine reads a line only where decodeJSON reads the same
// members: whatever it does not read goes to decodeJSON, so the audit's
// verdict on a line cannot depend on which of the two read it.
func FuzzFlatLine(f *testing.F) {
	for _, s := range []string{okAttempt(0, 0, 1, 0, 10, false), `{"a":1,"a":2}`, `{"a":"\u0041"}`, `{"a":[1]}`, `{"a":01}`, `{"a":-}`, `{"a":nul}`, `{"a":true} x`, "{\"a\":\"\xff\"}", `{}`, `{"a":1,}`, `{"a" 1}`, `{"a":1e5,"b":-0.5,"c":null,"d":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(sameMembers)
}

// Ensure the findings kept are, for each rule, the first keepFindings of
// all in (intent, detail) order, and the count all of them, whatever the
// order they come in.
func TestChaosFindingsKeepFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, keepFindings, 2*keepFindings + 1, 5000} {
		var all []chaosFinding
		var f chaosFindings
		for range n {
			rule := chaosRules[r.IntN(3)]
			fd := chaosFinding{rule, int64(r.IntN(n/3 + 1)), "k", fmt.Sprint("d", r.IntN(50))}
			all = append(all, fd)
			f.add(fd.rule, fd.intent, func() (string, string) { return fd.key, fd.detail })
		}
		slices.SortStableFunc(all, func(x, y chaosFinding) int {
			return cmp.Or(cmp.Compare(slices.Index(chaosRules, x.rule), slices.Index(chaosRules, y.rule)), cmp.Compare(x.intent, y.intent), cmp.Compare(x.detail, y.detail))
		})
		var want []chaosFinding
		count := map[string]int64{}
		for _, fd := range all {
			if count[fd.rule]++; count[fd.rule] <= keepFindings {
				want = append(want, fd)
			}
		}
		if got := f.sorted(); !slices.Equal(got, want) {
			t.Errorf("%d findings: kept %d, want the first %d of each rule", n, len(got), len(want))
		}
		for _, rule := range chaosRules {
			if got := f.fired(rule); got != count[rule] {
				t.Errorf("%d findings: %s fired %d, want %d", n, rule, got, count[rule])
			}
		}
	}
}

// Ensure an index table finds every index inserted and nothing else,
// through its growth, even when every key hashes alike.
func TestIndexTable(t *testing.T) {
	for _, hash := range []func(int64) uint64{func(k int64) uint64 { return uint64(k) * 0x9e3779b97f4a7c15 }, func(int64) uint64 { return 7 }} {
		keys := []int64{}
		var tab indexTable
		for i := range int64(3000) {
			keys = append(keys, i*3)
			tab.insert(hash(i*3), int32(i), func(j int32) uint64 { return hash(keys[j]) })
		}
		for i, k := range keys {
			if got, ok := tab.find(hash(k), func(j int32) bool { return keys[j] == k }); !ok || got != int32(i) {
				t.Fatalf("find(%d) = %d, %t, want %d", k, got, ok, i)
			}
			if _, ok := tab.find(hash(k+1), func(j int32) bool { return keys[j] == k+1 }); ok {
				t.Fatalf("find(%d) found a key never inserted", k+1)
			}
		}
	}
}

// Ensure where an intent was applied is printed in place order with its
// values in journal order, at most maxWherePlaces places of
// maxWhereValues values, the rest counted.
func TestWhereApplied(t *testing.T) {
	var b strings.Builder
	const places, per = 12, 11
	fmt.Fprintf(&b, `{"kind":"run","history_version":2,"store":"durable","target":"","claims":{"durable":true,"shared_store":true},"seed":1,"replicas":%d,"clients":2,`+
		`"duration_ms":1000,"kill_every_ms":-1,"faults":[],"chaos_start_us":0,"quiet_start_us":0,"attempts":1,"server_events":0,"places":%d}`+"\n", places, places)
	b.WriteString(okAttempt(0, 0, 1, 0, 10, false) + "\n")
	for p := places - 1; p >= 0; p-- { // places in the journal out of order
		fmt.Fprintf(&b, `{"kind":"place","place":%d,"replicas":[%d],"counter":%d,"effects":%d}`+"\n", p, p, per, per)
		for v := range per {
			fmt.Fprintf(&b, `{"kind":"effect","place":%d,"value":%d,"body_sha256":"%s","key":null,"replica":null,"at_us":null,"called_us":null}`+"\n", p, v+1, bodySHA(0))
		}
	}
	h, err := readChaosHistory(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for p := range maxWherePlaces {
		parts = append(parts, fmt.Sprintf("place %d values [1 2 3 4 5 6 7 8 9 10] and 1 more", p))
	}
	want := fmt.Sprintf("applied %d times (%s; 2 more places)", places*per, strings.Join(parts, "; "))
	c := h.check(23)
	if i := slices.IndexFunc(c.findings, func(f chaosFinding) bool { return f.rule == "duplicate" }); i < 0 || c.findings[i].detail != want {
		t.Errorf("findings = %v, want a duplicate %q", c.findings, want)
	}
}

// Ensure a duplicate on a sink's journal is laid to what came between the
// sink's receipt of its two calls, in the order received: a restart of the
// replica (the case: a call received before a kill, applied after
// it, and sent again by the new process), or nothing (one process sent
// both, though the intent's first attempt came before a restart); another
// replica; nothing said of a store's journal, which has no times.
func TestHowDuplicated(t *testing.T) {
	const kill, one = "target-applied-after-kill", "target-one-process-across-restart"
	for _, tc := range []struct {
		name, history string
		edits         []string // old, new, ...
		want          string   // the detail's explanation; "" for none
	}{
		{"applied after the kill", kill, nil, "; values 2 and 3 by replica 0: the process that sent value 2 (received at 2100 µs) ended at 3030 µs (fault_kill), and the one started at 3200 µs sent value 3"},
		{"both received after the restart", kill, []string{`"at_us":3400,"called_us":2100`, `"at_us":3400,"called_us":3300`},
			"; values 2 and 3 by one process of replica 0, no restart between them (received at 3300 and 3550 µs)"},
		{"two replicas", kill, []string{`"replicas":1,`, `"replicas":2,`, `"key":"chaos-1","replica":0,"at_us":3560`, `"key":"chaos-1","replica":1,"at_us":3560`},
			"; values 2 and 3 by replicas 0 and 1"},
		{"one process across a restart", one, nil, "; values 3 and 2 by one process of replica 0, no restart between them (received at 2600 and 3000 µs)"},
		{"received before the kill, applied after", one, []string{`"at_us":3100,"called_us":2600`, `"at_us":3100,"called_us":2100`},
			"; values 3 and 2 by replica 0: the process that sent value 3 (received at 2100 µs) ended at 2150 µs (fault_kill), and the one started at 2400 µs sent value 2"},
		{"a store's journal", "duplicate-durable", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(specRoot, "chaos", tc.history+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			text := string(data)
			for k := 0; k < len(tc.edits); k += 2 {
				if !strings.Contains(text, tc.edits[k]) {
					t.Fatalf("no %q in %s", tc.edits[k], tc.history)
				}
				text = strings.Replace(text, tc.edits[k], tc.edits[k+1], 1)
			}
			h, err := readChaosHistory(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			c := h.check(23)
			i := slices.IndexFunc(c.findings, func(f chaosFinding) bool { return f.rule == "duplicate" })
			if i < 0 {
				t.Fatalf("no duplicate in %v", c.findings)
			}
			_, how, _ := strings.Cut(c.findings[i].detail, ")")
			if how != tc.want {
				t.Errorf("duplicate explained %q, want %q", how, tc.want)
			}
		})
	}
}
