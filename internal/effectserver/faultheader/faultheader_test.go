package faultheader

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"idemlab/internal/protocol"
)

// Ensure every vocabulary word parses to its fault and anything else is refused.
func TestParse(t *testing.T) {
	accepted := []struct {
		in   string
		want Fault // its Name is in
	}{
		{"drop-reply", Fault{DropReply: true}},
		{"slow", Fault{Delay: 120 * time.Millisecond}},
		{"delay=0ms", Fault{}},
		{"delay=15ms", Fault{Delay: 15 * time.Millisecond}},
		{"delay=60000ms", Fault{Delay: 60 * time.Second}},
		{"crash-before-effect", Fault{Crash: BeforeEffect}},
		{"crash-after-effect", Fault{Crash: AfterEffect}},
		{"crash-after-record", Fault{Crash: AfterRecord}},
		{"crash-after-claim", Fault{Crash: AfterClaim}},
		{"crash-after-downstream", Fault{Crash: AfterDownstream}},
		{"drop-downstream-reply", Fault{DropDownstreamReply: true}},
		{"drop-downstream-reply,drop-reply", Fault{DropDownstreamReply: true, DropReply: true}},
		{"stall=5ms,crash-after-downstream", Fault{Stall: 5 * time.Millisecond, Crash: AfterDownstream}},
		{"fail-effect", Fault{Fail: BeforeEffect}},
		{"stall=5ms,fail-after-effect", Fault{Stall: 5 * time.Millisecond, Fail: AfterEffect}},
		{"slow,drop-reply", Fault{Delay: 120 * time.Millisecond, DropReply: true}},
		{"stall=800ms", Fault{Stall: 800 * time.Millisecond}},
		{"stall=800ms,crash-after-effect", Fault{Stall: 800 * time.Millisecond, Crash: AfterEffect}},
		{"delay=5ms,stall=0ms,crash-after-record", Fault{Delay: 5 * time.Millisecond, Crash: AfterRecord}},
	}
	for _, tt := range accepted {
		tt.want.Name = tt.in
		if got, err := Parse(tt.in); err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	refused := map[error][]string{
		ErrClash: {"fail-effect,crash-after-effect", "crash-after-claim,crash-after-downstream",
			"drop-downstream-reply,drop-downstream-reply", "slow,delay=5ms", "delay=0ms,delay=0ms",
			"crash-before-effect,crash-after-effect", "drop-reply,drop-reply"},
		ErrEmpty:   {"", "slow,", ",slow"},
		ErrUnknown: {"dorp", "Slow", " slow", "slow, drop-reply"},
		ErrArgument: {"stall=1s", "slow=1", "drop-reply=", "delay", "delay=", "delay=ms", "delay=15", "delay=15s",
			"delay=-1ms", "delay=+1ms", "delay=1.5ms", "delay=60001ms", "delay=999999ms"},
	}
	for want, ins := range refused {
		for _, in := range ins {
			if got, err := Parse(in); !errors.Is(err, want) || got != (Fault{}) {
				t.Errorf("Parse(%q) = %+v, %v; want no fault, %v", in, got, err, want)
			}
		}
	}
}

// Ensure the unknown-fault error names the fault, for a deterministic 400 body.
func TestParseUnknownMessage(t *testing.T) {
	_, err := Parse("dorp")
	if got, want := err.Error(), `unknown fault "dorp"`; got != want {
		t.Fatalf("Parse(dorp) error = %q, want %q", got, want)
	}
}

// Ensure FromHeader tells absent from present and refuses several lines.
func TestFromHeader(t *testing.T) {
	if _, present, err := FromHeader(http.Header{}); present || err != nil {
		t.Fatalf("FromHeader(empty) = present %v, %v, want false, nil", present, err)
	}
	f, present, err := FromHeader(http.Header{"X-Lab-Fault": {"slow"}})
	if !present || err != nil || f.Delay != protocol.SlowDelay {
		t.Fatalf("FromHeader(slow) = %+v, %v, %v", f, present, err)
	}
	if _, present, err := FromHeader(http.Header{"X-Lab-Fault": {"slow", "slow"}}); !present || !errors.Is(err, ErrMultiple) {
		t.Fatalf("FromHeader(two lines) = present %v, %v, want true, ErrMultiple", present, err)
	}
}

// Ensure the vocabulary holds exactly the designed names, and every fault
// the protocol names has a behaviour here.
func TestNames(t *testing.T) {
	want := []string{"crash-after-claim", "crash-after-downstream", "crash-after-effect", "crash-after-record", "crash-before-effect", "delay", "drop-downstream-reply", "drop-reply", "fail-after-effect", "fail-effect", "slow", "stall"}
	if got := Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	var named []string
	for _, f := range protocol.Faults {
		named = append(named, string(f))
		if _, ok := pointOf[f]; !ok {
			t.Errorf("fault %s acts at no point (pointOf)", f)
		}
	}
	slices.Sort(named)
	if !reflect.DeepEqual(named, want) {
		t.Fatalf("protocol.Faults = %v, want %v", named, want)
	}
}

// Ensure exactly the downstream mode's faults say they need a downstream.
func TestDownstream(t *testing.T) {
	for in, want := range map[string]bool{
		"crash-after-claim": true, "crash-after-downstream": true, "drop-downstream-reply": true,
		"slow,drop-downstream-reply": true, "crash-after-effect": false, "drop-reply": false, "stall=1ms": false,
	} {
		f, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Downstream(); got != want {
			t.Errorf("Parse(%q).Downstream() = %v, want %v", in, got, want)
		}
	}
}

// Ensure an error quotes at most MaxEcho bytes of a bad value, with a
// marker, so a 400 cannot echo a whole header back (a probe saw 100 kB
// echoed); a value up to MaxEcho bytes is quoted whole.
func TestParseEchoBounded(t *testing.T) {
	long := strings.Repeat("q", 100_000)
	tests := []struct{ in, want string }{
		{strings.Repeat("q", MaxEcho), `unknown fault "` + strings.Repeat("q", MaxEcho) + `"`},
		{long, `unknown fault "` + long[:MaxEcho] + `"...`},
		{"delay=" + long, `bad fault argument "delay=` + long[:MaxEcho-len("delay=")] + `"...`},
		{"slow,slow," + long, `two faults act at the same point "slow,slow,` + long[:MaxEcho-len("slow,slow,")] + `"...`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%d bytes) error = %.200q, want %.200q", len(tt.in), err, tt.want)
		}
	}
}
