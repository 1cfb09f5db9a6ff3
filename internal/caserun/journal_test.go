package caserun

import (
	"strings"
	"testing"
)

// Ensure a journal command's output is taken only as one State object
// whose effects are valued 1..counter in order, and refused otherwise,
// naming what was wrong.
func TestParseJournal(t *testing.T) {
	const e1, e2 = `{"value":1,"body_sha256":"aa"}`, `{"value":2,"body_sha256":"bb"}`
	for _, tc := range []struct {
		name, out, want string
	}{
		{"two effects", `{"counter":2,"effects":[` + e1 + `,` + e2 + `]}` + "\n", ""},
		{"none", `{"counter":0,"effects":[]}`, ""},
		{"not JSON", `3`, "cannot unmarshal"},
		{"empty", ``, "EOF"},
		{"unknown member", `{"counter":0,"effects":[],"keys":[]}`, "unknown field"},
		{"two objects", `{"counter":0,"effects":[]}{"counter":0,"effects":[]}`, "more after"},
		{"a gap", `{"counter":2,"effects":[` + e2 + `]}`, "effect 0 has value 2, want 1"},
		{"out of order", `{"counter":2,"effects":[` + e2 + `,` + e1 + `]}`, "effect 0 has value 2, want 1"},
		{"counter ahead", `{"counter":3,"effects":[` + e1 + `,` + e2 + `]}`, "counter 3, 2 effects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseJournal([]byte(tc.out))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("parseJournal = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("parseJournal error = %v, want one containing %q", err, tc.want)
			case tc.want == "" && st.Counter != int64(len(st.Effects)):
				t.Fatalf("parseJournal = %+v: counter and effects disagree", st)
			}
		})
	}
}

// Fuzz parseJournal with what a target's journal command might print: it
// never panics, and what it accepts is a journal valued 1..counter.
func FuzzParseJournal(f *testing.F) {
	f.Add([]byte(`{"counter":1,"effects":[{"value":1,"body_sha256":"aa"}]}`))
	f.Add([]byte(`{"counter":0,"effects":null}`))
	f.Add([]byte(`{"counter":-1,"effects":[]} `))
	f.Fuzz(func(t *testing.T, out []byte) {
		st, err := parseJournal(out)
		if err != nil {
			return
		}
		if st.Counter != int64(len(st.Effects)) {
			t.Fatalf("accepted counter %d with %d effects", st.Counter, len(st.Effects))
		}
		for i, e := range st.Effects {
			if e.Value != int64(i+1) {
				t.Fatalf("accepted effect %d valued %d", i, e.Value)
			}
		}
	})
}
