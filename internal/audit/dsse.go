package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"idemlab/internal/audit/dsse"
)

// EnvelopeFile is the DSSE envelope audit -write -sign writes beside the
// statement: its exact bytes, signed with ed25519. A signature says who
// vouched for these bytes, not that the run was honest (a signer can sign
// invented counts): audit -reproduce is the check of that.
const EnvelopeFile = "statement.intoto.dsse.json"

// CapEnvelope caps the envelope: the statement in base64 and a signature.
const CapEnvelope = 2 * CapStatement

// readKey reads the key file of flag (-verify-key, -sign) with parse.
func readKey[K any](flag, path string, parse func([]byte) (K, error)) (K, error) {
	var zero K
	data, err := readInside(filepath.Dir(path), filepath.Base(path), dsse.MaxKeyFile)
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", flag, path, unwrapPath(err))
	}
	key, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return key, nil
}

// checkSignature checks the envelope, when there is one or -verify-key
// asks for one: exactly its members, the in-toto payload type, the
// statement as its payload byte for byte, and with -verify-key a
// signature that verifies with that key.
func (a *auditor) checkSignature(statement []byte) {
	fail := func(format string, args ...any) {
		a.fail(Failure{Check: CheckStatement, Field: "signature", Message: EnvelopeFile + ": " + fmt.Sprintf(format, args...)})
	}
	a.check()
	data, err := readInside(a.opts.Evidence, EnvelopeFile, CapEnvelope)
	switch {
	case errors.Is(err, os.ErrNotExist) && a.verifyKey == nil:
		return
	case errors.Is(err, os.ErrNotExist):
		fail("missing: -verify-key checks the signed statement runner -sign writes, and this folder has none")
		return
	case err != nil:
		a.failf(CheckFile, "file %s: %v", EnvelopeFile, unwrapPath(err))
		return
	}
	v, err := decodeJSON(data, capEnvelopeJSON)
	env, _ := v.(map[string]any)
	if err != nil || env == nil {
		fail("not a JSON object: %v", err)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(env)) { // the first unknown name, the same on every run
		if !slices.Contains([]string{"payloadType", "payload", "signatures"}, k) {
			fail("unknown member %q (a DSSE envelope has payloadType, payload and signatures)", k)
			return
		}
	}
	if typ, _ := env["payloadType"].(string); typ != dsse.PayloadType {
		fail("payloadType %s, want %q", render(env["payloadType"]), dsse.PayloadType)
		return
	}
	b64, _ := env["payload"].(string)
	payload, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		fail("payload: not standard base64: %v", err)
		return
	}
	if statement != nil && !bytes.Equal(payload, statement) {
		fail("its payload is not %s byte for byte: the signature is of other bytes", StatementFile)
		return
	}
	sigs, _ := env["signatures"].([]any)
	if len(sigs) == 0 || len(sigs) > 16 {
		fail("signatures: %d, want 1..16", len(sigs))
		return
	}
	msg := dsse.PAE(dsse.PayloadType, payload)
	var ids []string
	verified := false
	for i, s := range sigs {
		m, _ := s.(map[string]any)
		id, ok1 := m["keyid"].(string)
		sb64, ok2 := m["sig"].(string)
		if !ok1 || !ok2 || len(m) != 2 {
			fail("signatures[%d]: want exactly keyid and sig, strings", i)
			return
		}
		sig, err := base64.StdEncoding.Strict().DecodeString(sb64)
		if err != nil {
			fail("signatures[%d].sig: not standard base64: %v", i, err)
			return
		}
		ids = append(ids, id)
		if a.verifyKey != nil && len(sig) == ed25519.SignatureSize && ed25519.Verify(a.verifyKey, msg, sig) {
			verified = true
		}
	}
	switch {
	case a.verifyKey == nil:
		a.note(fmt.Sprintf("%s: signed, by key id %s (not verified: pass -verify-key PUBFILE with the signer's public key)", EnvelopeFile, strings.Join(ids, ", ")))
	case verified:
		a.claim("signature", a.verifyKeyID)
	default:
		fail("no signature verifies with the key of -verify-key (%s); the envelope names key ids %s", a.verifyKeyID, strings.Join(ids, ", "))
	}
}
