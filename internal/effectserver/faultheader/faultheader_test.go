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
	tests := []struct {
		in   string
		want Fault
		err  error
	}{
		{in: "drop-reply", want: Fault{Name: "drop-reply", DropReply: true}},
		{in: "slow", want: Fault{Name: "slow", Delay: 120 * time.Millisecond}},
		{in: "delay=0ms", want: Fault{Name: "delay=0ms"}},
		{in: "delay=15ms", want: Fault{Name: "delay=15ms", Delay: 15 * time.Millisecond}},
		{in: "delay=60000ms", want: Fault{Name: "delay=60000ms", Delay: 60 * time.Second}},
		{in: "crash-before-effect", want: Fault{Name: "crash-before-effect", Crash: BeforeEffect}},
		{in: "crash-after-effect", want: Fault{Name: "crash-after-effect", Crash: AfterEffect}},
		{in: "crash-after-record", want: Fault{Name: "crash-after-record", Crash: AfterRecord}},
		{in: "crash-after-claim", want: Fault{Name: "crash-after-claim", Crash: AfterClaim}},
		{in: "crash-after-downstream", want: Fault{Name: "crash-after-downstream", Crash: AfterDownstream}},
		{in: "drop-downstream-reply", want: Fault{Name: "drop-downstream-reply", DropDownstreamReply: true}},
		{in: "drop-downstream-reply,drop-reply", want: Fault{Name: "drop-downstream-reply,drop-reply", DropDownstreamReply: true, DropReply: true}},
		{in: "stall=5ms,crash-after-downstream", want: Fault{Name: "stall=5ms,crash-after-downstream", Stall: 5 * time.Millisecond, Crash: AfterDownstream}},
		{in: "fail-effect", want: Fault{Name: "fail-effect", Fail: BeforeEffect}},
		{in: "stall=5ms,fail-after-effect", want: Fault{Name: "stall=5ms,fail-after-effect", Stall: 5 * time.Millisecond, Fail: AfterEffect}},
		{in: "fail-effect,crash-after-effect", err: ErrClash},
		{in: "crash-after-claim,crash-after-downstream", err: ErrClash},
		{in: "drop-downstream-reply,drop-downstream-reply", err: ErrClash},
		{in: "", err: ErrEmpty},
		{in: "dorp", err: ErrUnknown},
		{in: "Slow", err: ErrUnknown},
		{in: " slow", err: ErrUnknown},
		{in: "slow,drop-reply", want: Fault{Name: "slow,drop-reply", Delay: 120 * time.Millisecond, DropReply: true}},
		{in: "stall=800ms", want: Fault{Name: "stall=800ms", Stall: 800 * time.Millisecond}},
		{in: "stall=800ms,crash-after-effect", want: Fault{Name: "stall=800ms,crash-after-effect", Stall: 800 * time.Millisecond, Crash: AfterEffect}},
		{in: "delay=5ms,stall=0ms,crash-after-record", want: Fault{Name: "delay=5ms,stall=0ms,crash-after-record", Delay: 5 * time.Millisecond, Crash: AfterRecord}},
		{in: "slow,delay=5ms", err: ErrClash},
		{in: "delay=0ms,delay=0ms", err: ErrClash},
		{in: "crash-before-effect,crash-after-effect", err: ErrClash},
		{in: "drop-reply,drop-reply", err: ErrClash},
		{in: "slow,", err: ErrEmpty},
		{in: ",slow", err: ErrEmpty},
		{in: "slow, drop-reply", err: ErrUnknown},
		{in: "stall=1s", err: ErrArgument},
		{in: "slow=1", err: ErrArgument},
		{in: "drop-reply=", err: ErrArgument},
		{in: "delay", err: ErrArgument},
		{in: "delay=", err: ErrArgument},
		{in: "delay=ms", err: ErrArgument},
		{in: "delay=15", err: ErrArgument},
		{in: "delay=15s", err: ErrArgument},
		{in: "delay=-1ms", err: ErrArgument},
		{in: "delay=+1ms", err: ErrArgument},
		{in: "delay=1.5ms", err: ErrArgument},
		{in: "delay=60001ms", err: ErrArgument},
		{in: "delay=999999ms", err: ErrArgument},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if !errors.Is(err, tt.err) {
			t.Errorf("Parse(%q) error = %v, want %v", tt.in, err, tt.err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
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

// Ensure registering a name twice is treated as a programmer error.
func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("register(slow) a second time did not panic")
		}
	}()
	register("slow", fixed(Fault{}))
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
