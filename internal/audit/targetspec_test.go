package audit

import (
	"path/filepath"
	"strings"
	"testing"
)

// specOf reads a target.json made of the minimal one with edits applied.
func specOf(t *testing.T, edits ...string) *targetSpec {
	t.Helper()
	s, err := LoadSchemas(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"name": "tiny", "summary": "s", "start": {"argv": ["./tiny", "{port}"], "ready": {"tcp": true}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"}, "replay": null, "effects": "sink",
  "claims": {"durable": true, "shared_store": false, "capacity": null, "max_body": null}}`
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(doc, edits[i]) {
			t.Fatalf("edit %q: not in the target.json", edits[i])
		}
		doc = strings.Replace(doc, edits[i], edits[i+1], 1)
	}
	spec, err := s.readTargetSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// Ensure the audit reads a target's sink, the header it forwards its key
// in, its key format and its key TTL as the runner does.
func TestReadTargetSpecSinkKeys(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edits     []string
		sink      bool
		header    string
		format    string
		keyTTL    int64 // 0: none
		countOnly bool
	}{
		{"sink", nil, true, "Idempotency-Key", "verbatim", 0, false},
		{"sink forwarding in its own header", []string{`"effects": "sink"`, `"effects": {"sink": {"key_header": "X-Pay-Key"}}`}, true, "X-Pay-Key", "verbatim", 0, false},
		{"sink forwarding in the request's header", []string{`"key_header": "Idempotency-Key"`, `"key_header": "X-Idempotency-Key"`, `"effects": "sink"`, `"effects": {"sink": {}}`}, true, "X-Idempotency-Key", "verbatim", 0, false},
		{"uuid keys and a TTL", []string{`"key_header": "Idempotency-Key"`, `"key_header": "Idempotency-Key", "key_format": "uuid"`, `"max_body": null`, `"max_body": null, "key_ttl_ms": 1000`}, true, "Idempotency-Key", "uuid", 1000, false},
		{"count", []string{`"effects": "sink"`, `"effects": {"count": ["cat"]}`}, false, "Idempotency-Key", "verbatim", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := specOf(t, tc.edits...)
			ttl := int64(0)
			if spec.keyTTL != nil {
				ttl = *spec.keyTTL
			}
			if spec.sink != tc.sink || spec.sink && spec.forwardHeader != tc.header || spec.keyFormat != tc.format || ttl != tc.keyTTL {
				t.Fatalf("sink %v header %q format %q TTL %d, want %v %q %q %d", spec.sink, spec.forwardHeader, spec.keyFormat, ttl, tc.sink, tc.header, tc.format, tc.keyTTL)
			}
		})
	}
}

// Ensure the audit's own UUID of a case key is the runner's (vectors from
// Python's uuid.uuid5 in the lab's namespace), and a malformed key is sent
// as written.
func TestSentKey(t *testing.T) {
	for _, tc := range []struct{ format, key, want string }{
		{"uuid", "same", "262b8893-bf06-5b5b-ba4d-8a208a32ae10"},
		{"uuid", "pay-1", "a7d4a278-32f4-5a67-a30b-0837db4b0729"},
		{"uuid", "key-63", "1ac2b8cf-62ae-5eeb-ac20-ffada1666de7"},
		{"uuid", "bad key", "bad key"},
		{"uuid", strings.Repeat("k", 65), strings.Repeat("k", 65)},
		{"verbatim", "same", "same"},
	} {
		if got := sentKey(&tc.key, tc.format); *got != tc.want {
			t.Errorf("sentKey(%.20q, %s) = %q, want %q", tc.key, tc.format, *got, tc.want)
		}
	}
	if got := sentKey(nil, "uuid"); got != nil {
		t.Errorf("sentKey(nil) = %q, want nil", *got)
	}
}

// Ensure the downstream faults act at the sink, which plays the ledger,
// and cannot act on a target that counts its own effects.
func TestPlaceDownstreamFaults(t *testing.T) {
	sinkSpec := specOf(t)
	countSpec := specOf(t, `"effects": "sink"`, `"effects": {"count": ["cat"]}`)
	for _, f := range []string{"crash-after-claim", "crash-after-downstream", "drop-downstream-reply"} {
		if why := placeFault(f, sinkSpec); why != "" {
			t.Errorf("placeFault(%s) on a sink target = %q, want it placed", f, why)
		}
		if why := placeFault(f, countSpec); !strings.Contains(why, "acts at the effect sink") {
			t.Errorf("placeFault(%s) on a count target = %q, want it refused", f, why)
		}
	}
}

// Ensure an attached target runs exactly the cases that need no process
// control, as docs/targets.md lists them (worked out by hand from the case
// files), and says why for the rest.
func TestTargetNotRunAttached(t *testing.T) {
	schemas, err := LoadSchemas(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases(filepath.Join("..", ".."), schemas)
	if err != nil {
		t.Fatal(err)
	}
	capacity := int64(64)
	spec := &targetSpec{name: "attached", attach: true, sink: true, sharedStore: true, capacity: &capacity, keyFormat: "verbatim", native: map[string]bool{}}
	want := map[string]string{
		"keyed_lost_reply": "", "concurrent_duplicate": "", "body_conflict": "", "body_conflict_no_content_type": "",
		"effect_fails_then_retry": "", "fails_after_effect_then_retry": "", "client_gives_up_owner_running": "",
		"oversized_key_and_body": "", "capacity_and_input": "", "downstream_ledger_reply_dropped": "", "unkeyed_lost_reply": "",
		"restart_after_reply": noProcessControl, "crash_before_effect": noProcessControl, "crash_after_effect": noProcessControl,
		"crash_after_record": noProcessControl, "replicas_lost_reply": noProcessControl, "replicas_concurrent_duplicate": noProcessControl,
		"downstream_crash_after_ledger_forwarded": noProcessControl, "downstream_crash_after_claim": noProcessControl,
	}
	for _, c := range cases {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		if got := targetNotRun(c, spec, capacity); got != w {
			t.Errorf("%s on an attached target: not run %q, want %q", c.Name, got, w)
		}
	}
}
