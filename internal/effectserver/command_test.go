package effectserver

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"idemlab/internal/flaghelp"
	"idemlab/internal/protocol"
)

// Ensure -h lists every flag of the FlagSet with its default, so that the
// help cannot name a flag or a default the command does not have.
func TestHelpListsEveryFlag(t *testing.T) {
	help := Help()
	var cfg Config
	newFlagSet(&cfg).VisitAll(func(f *flag.Flag) {
		i := strings.Index(help, "\n  -"+f.Name)
		if i < 0 {
			t.Errorf("-h lacks -%s", f.Name)
			return
		}
		entry := help[i+1:]
		if j := strings.Index(entry[1:], "\n  -"); j >= 0 {
			entry = entry[:j+1]
		}
		entry = strings.Join(strings.Fields(entry), " ")
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(entry, "(default "+f.DefValue+")") {
			t.Errorf("-h entry of -%s = %q, want its default %s", f.Name, entry, f.DefValue)
		}
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool && !strings.Contains(f.Usage, "`") {
			t.Errorf("-%s's usage names no argument in backquotes: %q", f.Name, f.Usage)
		}
	})
	for _, line := range strings.Split(help, "\n") {
		if len(line) > flaghelp.Width {
			t.Errorf("-h line of %d bytes, more than %d: %q", len(line), flaghelp.Width, line)
		}
	}
}

// Ensure ParseArgs starts from the protocol's defaults and reads each flag.
func TestParseArgs(t *testing.T) {
	cfg, err := ParseArgs([]string{"-state", "/s"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{StateDir: "/s", Addr: protocol.DefaultAddr, Store: protocol.Volatile, Capacity: protocol.DefaultCapacity,
		MaxBody: protocol.DefaultMaxBody, Wait: protocol.DefaultWait, ForwardKey: true, Service: DefaultService, Lease: DefaultLease}
	if cfg.StateDir != want.StateDir || cfg.Addr != want.Addr || cfg.Store != want.Store || cfg.Capacity != want.Capacity ||
		cfg.MaxBody != want.MaxBody || cfg.Wait != want.Wait || cfg.ForwardKey != want.ForwardKey || cfg.Service != want.Service ||
		cfg.Lease != want.Lease || cfg.KeyTTL != 0 || cfg.Faults || cfg.UnsafeRegistry != protocol.Sound {
		t.Fatalf("ParseArgs defaults = %+v, want %+v", cfg, want)
	}
	cfg, err = ParseArgs([]string{"-store", "durable", "-state", "/s", "-faults", "-unsafe-registry", "evict-oldest", "-wait", "2s"})
	if err != nil || cfg.Store != protocol.Durable || !cfg.Faults || cfg.UnsafeRegistry != protocol.FlawEvictOldest || cfg.Wait != 2*time.Second {
		t.Fatalf("ParseArgs = %+v, %v", cfg, err)
	}
	if _, err := ParseArgs([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseArgs(-h) error = %v, want flag.ErrHelp", err)
	}
	for _, args := range [][]string{{"-nosuch"}, {"-state", "/s", "x"}, {"-state", "/s", "-lease", "1s"}, {"-store", "nosuch"}} {
		if _, err := ParseArgs(args); ExitStatus(err) != ExitUsage {
			t.Errorf("ParseArgs(%q) error = %v (status %d), want a usage error", args, err, ExitStatus(err))
		}
	}
}
