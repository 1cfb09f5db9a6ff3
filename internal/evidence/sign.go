package evidence

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
	"strconv"
)

// EnvelopeName is the DSSE envelope runner -sign writes beside the
// statement: statement.intoto.json's exact bytes as its payload, signed
// with ed25519. Like the statement, the manifest does not list it.
const EnvelopeName = "statement.intoto.dsse.json"

// PayloadType is the envelope's payload type: an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// MaxKeyFile bounds the key file runner -sign reads.
const MaxKeyFile = 64 << 10

// A Signer signs the statement: an ed25519 private key and the key id
// the envelope names it by (its public key's OpenSSH fingerprint,
// "SHA256:...", as ssh-keygen -l prints it).
type Signer struct {
	key   ed25519.PrivateKey
	KeyID string
}

// ParseSigningKey reads an ed25519 private key: an OpenSSH private key file
// without a passphrase (ssh-keygen -t ed25519 with an empty one), or a PKCS #8 PEM
// ("PRIVATE KEY", openssl genpkey -algorithm ed25519). A passphrase, another
// key type or anything else is an error saying so.
func ParseSigningKey(data []byte) (*Signer, error) {
	block, rest := pem.Decode(data)
	if block == nil || len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("not one PEM block (want an OpenSSH or PKCS #8 ed25519 private key)")
	}
	var key ed25519.PrivateKey
	switch block.Type {
	case "OPENSSH PRIVATE KEY":
		k, err := parseOpenSSH(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("OpenSSH private key: %w", err)
		}
		key = k
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PKCS #8 private key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PKCS #8 private key: a %T, want ed25519", k)
		}
		key = ek
	default:
		return nil, fmt.Errorf("PEM block %q: want OPENSSH PRIVATE KEY or PRIVATE KEY (ed25519)", block.Type)
	}
	return &Signer{key: key, KeyID: Fingerprint(key.Public().(ed25519.PublicKey))}, nil
}

// Fingerprint is an ed25519 public key's OpenSSH fingerprint: SHA256: and
// the unpadded base64 of the SHA-256 of its wire form (string
// "ssh-ed25519", string key).
func Fingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(sshPublicBlob(pub))
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func sshPublicBlob(pub ed25519.PublicKey) []byte {
	var b []byte
	for _, s := range [][]byte{[]byte("ssh-ed25519"), pub} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
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
		return nil, fmt.Errorf("encrypted with %s (a passphrase): runner -sign reads keys without one (ssh-keygen -t ed25519 -N '' -f FILE makes one)", cipher)
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

func (r *sshReader) u32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = firstErr(r.err, errors.New("truncated"))
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *sshReader) str() []byte {
	n := r.u32()
	if r.err != nil || uint64(n) > uint64(len(r.b)) {
		r.err = firstErr(r.err, errors.New("truncated"))
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// pae is DSSE's pre-authentication encoding of a payload:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func pae(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteString(" ")
	b.WriteString(payloadType)
	b.WriteString(" ")
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteString(" ")
	b.Write(payload)
	return b.Bytes()
}

// envelope is a DSSE envelope with one signature.
type envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []signature `json:"signatures"`
}

type signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// Envelope signs statement (the exact bytes of statement.intoto.json) and
// returns the DSSE envelope: its payload type, the payload in standard
// base64, and one ed25519 signature over the payload's PAE, named by the
// key's fingerprint. It says who signed these bytes, nothing about
// whether the run they describe was honest.
func (s *Signer) Envelope(statement []byte) ([]byte, error) {
	sig := ed25519.Sign(s.key, pae(PayloadType, statement))
	b, err := Marshal(envelope{PayloadType: PayloadType, Payload: base64.StdEncoding.EncodeToString(statement),
		Signatures: []signature{{KeyID: s.KeyID, Sig: base64.StdEncoding.EncodeToString(sig)}}})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", EnvelopeName, err)
	}
	return b, nil
}
