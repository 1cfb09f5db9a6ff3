// Package dsse holds the audit's DSSE and ed25519 key handling: reading an
// ed25519 key (OpenSSH or PEM), its OpenSSH fingerprint, DSSE's
// pre-authentication encoding, and signing a payload into an envelope.
// The runner only reads a -sign key with it, to refuse a bad one early.
package dsse

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// PayloadType is the payload type of an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// MaxKeyFile bounds a key file a command reads.
const MaxKeyFile = 64 << 10

// ParsePublicKey reads an ed25519 public key: an OpenSSH public key line
// ("ssh-ed25519 BASE64 [comment]", as ssh-keygen writes KEY.pub) or a PEM
// "PUBLIC KEY" (PKIX, as openssl pkey -pubout writes it).
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
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

// Fingerprint is the OpenSSH fingerprint of an ed25519 public key
// ("SHA256:...", as ssh-keygen -l prints it).
func Fingerprint(pub ed25519.PublicKey) string {
	var blob []byte
	for _, s := range [][]byte{[]byte("ssh-ed25519"), pub} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(s)))
		blob = append(blob, s...)
	}
	sum := sha256.Sum256(blob)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// PAE is DSSE's pre-authentication encoding:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func PAE(payloadType string, payload []byte) []byte {
	return append([]byte("DSSEv1 "+strconv.Itoa(len(payloadType))+" "+payloadType+" "+strconv.Itoa(len(payload))+" "), payload...)
}

// ParsePrivateKey reads an ed25519 private key: an OpenSSH private key
// without a passphrase (ssh-keygen -t ed25519 -N "") or a PKCS #8 PEM
// ("PRIVATE KEY", openssl genpkey -algorithm ed25519). A passphrase,
// another key type or anything else is an error saying so.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(data)
	if block == nil || len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("not one PEM block (want an OpenSSH or PKCS #8 ed25519 private key)")
	}
	switch block.Type {
	case "OPENSSH PRIVATE KEY":
		k, err := parseOpenSSH(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("OpenSSH private key: %w", err)
		}
		return k, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PKCS #8 private key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PKCS #8 private key: a %T, want ed25519", k)
		}
		return ek, nil
	}
	return nil, fmt.Errorf("PEM block %q: want OPENSSH PRIVATE KEY or PRIVATE KEY (ed25519)", block.Type)
}

// parseOpenSSH reads the "openssh-key-v1" format (OpenSSH's PROTOCOL.key)
// of one unencrypted ed25519 key: the magic, cipher and kdf "none", no kdf
// options, one public key, then the private section (two equal check
// words, the key type, the 32-byte public key, the 64-byte private key,
// a comment, padding 1, 2, 3, ...).
func parseOpenSSH(b []byte) (ed25519.PrivateKey, error) {
	const magic = "openssh-key-v1\x00"
	if !bytes.HasPrefix(b, []byte(magic)) {
		return nil, errors.New("no openssh-key-v1 header")
	}
	r := &sshReader{b: b[len(magic):]}
	cipher, kdf, kdfOpts := r.str(), r.str(), r.str()
	if r.err == nil && (string(cipher) != "none" || string(kdf) != "none" || len(kdfOpts) != 0) {
		return nil, fmt.Errorf("encrypted with %s (a passphrase): a signer reads keys without one (ssh-keygen -t ed25519 -N '' -f FILE makes one)", cipher)
	}
	if n := r.u32(); r.err == nil && n != 1 {
		return nil, fmt.Errorf("%d keys, want 1", n)
	}
	r.str() // the public key, repeated in the private section
	priv := &sshReader{b: r.str()}
	if r.err != nil {
		return nil, r.err
	}
	c1, c2 := priv.u32(), priv.u32()
	typ, pub, key := priv.str(), priv.str(), priv.str()
	priv.str() // comment
	switch {
	case priv.err != nil:
		return nil, priv.err
	case c1 != c2:
		return nil, errors.New("check words differ (a wrong passphrase, or a damaged file)")
	case string(typ) != "ssh-ed25519":
		return nil, fmt.Errorf("key type %q, want ssh-ed25519", typ)
	case len(pub) != ed25519.PublicKeySize || len(key) != ed25519.PrivateKeySize || !bytes.Equal(key[32:], pub):
		return nil, errors.New("malformed ed25519 key")
	}
	for i, p := range priv.b {
		if p != byte(i+1) {
			return nil, errors.New("bad padding")
		}
	}
	return ed25519.PrivateKey(bytes.Clone(key)), nil
}

// sshReader reads the SSH wire format's uint32 and length-prefixed
// strings; the first error sticks.
type sshReader struct {
	b   []byte
	err error
}

// take reads the next n bytes; nil after an error.
func (r *sshReader) take(n uint64) []byte {
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errors.New("truncated")
	}
	if r.err != nil {
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *sshReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *sshReader) str() []byte { return r.take(uint64(r.u32())) }

// envelopeDoc is a DSSE envelope.
type envelopeDoc struct {
	PayloadType string         `json:"payloadType"`
	Payload     string         `json:"payload"`
	Signatures  []signatureDoc `json:"signatures"`
}

type signatureDoc struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// Sign returns the DSSE envelope of payload (an in-toto Statement's exact
// bytes): its payload type, the payload in standard base64, and one
// ed25519 signature over the payload's PAE, named by the key's
// fingerprint, as two-space indented JSON with a final newline. It says
// who signed these bytes, nothing about whether the run they describe was
// honest.
func Sign(key ed25519.PrivateKey, payload []byte) []byte {
	sig := ed25519.Sign(key, PAE(PayloadType, payload))
	doc := envelopeDoc{PayloadType: PayloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []signatureDoc{{KeyID: Fingerprint(key.Public().(ed25519.PublicKey)), Sig: base64.StdEncoding.EncodeToString(sig)}}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(doc) // strings only: it cannot fail
	return buf.Bytes()
}
