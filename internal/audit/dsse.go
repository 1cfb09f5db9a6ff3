package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// EnvelopeFile is the DSSE envelope runner -sign writes beside the
// statement: statement.intoto.json's exact bytes as its payload, and an
// ed25519 signature over DSSE's pre-authentication encoding of it. The
// manifest does not list it (it signs the statement, which lists the
// manifest).
//
// A signature that verifies with a reviewer's key says who signed these
// bytes: that holder of the key ran the lab, or at least vouched for its
// output. It says nothing about whether the run was honest (a signer can
// sign invented counts); audit -reproduce is the check of that.
const EnvelopeFile = "statement.intoto.dsse.json"

// envelopePayloadType is the payload type of an in-toto Statement.
const envelopePayloadType = "application/vnd.in-toto+json"

// CapEnvelope caps the envelope: the statement in base64 and a signature.
const CapEnvelope = 2 * CapStatement

// maxPublicKeyFile bounds the -verify-key file.
const maxPublicKeyFile = 64 << 10

// readPublicKey reads an ed25519 public key: an OpenSSH public key line
// ("ssh-ed25519 BASE64 [comment]", as ssh-keygen writes KEY.pub) or a PEM
// "PUBLIC KEY" (PKIX, as openssl pkey -pubout writes it). It returns the
// key and its OpenSSH fingerprint ("SHA256:...", as ssh-keygen -l prints
// it).
func readPublicKey(path string) (ed25519.PublicKey, string, error) {
	data, err := readRegularFile(path, maxPublicKeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("-verify-key %s: %w", path, unwrapPath(err))
	}
	pub, err := parsePublicKey(data)
	if err != nil {
		return nil, "", fmt.Errorf("-verify-key %s: %w", path, err)
	}
	return pub, fingerprint(pub), nil
}

func parsePublicKey(data []byte) (ed25519.PublicKey, error) {
	text := strings.TrimSpace(string(data))
	if typ, rest, ok := strings.Cut(text, " "); ok && !strings.Contains(text, "\n") && !strings.HasPrefix(text, "-----") {
		if typ != "ssh-ed25519" {
			return nil, fmt.Errorf("an OpenSSH %s key, want ssh-ed25519", typ)
		}
		b64, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		blob, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("OpenSSH public key: %v", err)
		}
		// string "ssh-ed25519", string key (32 bytes)
		want := append(binary.BigEndian.AppendUint32(nil, 11), "ssh-ed25519"...)
		want = binary.BigEndian.AppendUint32(want, ed25519.PublicKeySize)
		if len(blob) != len(want)+ed25519.PublicKeySize || !bytes.HasPrefix(blob, want) {
			return nil, errors.New("OpenSSH public key: not an ed25519 key's wire form")
		}
		return ed25519.PublicKey(blob[len(want):]), nil
	}
	block, rest := pem.Decode(data)
	if block == nil || len(bytes.TrimSpace(rest)) > 0 || block.Type != "PUBLIC KEY" {
		return nil, errors.New("want an OpenSSH public key line (ssh-ed25519 ...) or a PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PEM public key: %v", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("PEM public key: a %T, want ed25519", k)
	}
	return pub, nil
}

// fingerprint is the OpenSSH fingerprint of an ed25519 public key.
func fingerprint(pub ed25519.PublicKey) string {
	var blob []byte
	for _, s := range [][]byte{[]byte("ssh-ed25519"), pub} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(s)))
		blob = append(blob, s...)
	}
	sum := sha256.Sum256(blob)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// pae is DSSE's pre-authentication encoding:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func pae(payloadType string, payload []byte) []byte {
	return append([]byte("DSSEv1 "+strconv.Itoa(len(payloadType))+" "+payloadType+" "+strconv.Itoa(len(payload))+" "), payload...)
}

// checkSignature checks the envelope, when there is one or -verify-key
// asks for one: strict JSON of exactly payloadType, payload and
// signatures (each keyid and sig); the in-toto payload type; a payload
// that is statement.intoto.json byte for byte; and with -verify-key, a
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
	for k := range env {
		if !slices.Contains([]string{"payloadType", "payload", "signatures"}, k) {
			fail("unknown member %q (a DSSE envelope has payloadType, payload and signatures)", k)
			return
		}
	}
	if typ, _ := env["payloadType"].(string); typ != envelopePayloadType {
		fail("payloadType %s, want %q", render(env["payloadType"]), envelopePayloadType)
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
	msg := pae(envelopePayloadType, payload)
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
