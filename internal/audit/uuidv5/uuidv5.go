// Package uuidv5 is RFC 9562's name-based UUID, version 5 (SHA-1), and
// nothing else: the lab sends a case's key to a target that wants UUIDs as
// one, and the audit derives it again, both with this algorithm alone.
package uuidv5

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// URL is RFC 9562's namespace of URLs (section 6.6).
const URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8"

// Of is the version 5 UUID of name in namespace ns, both in canonical
// lower-case text (RFC 9562, section 5.5).
func Of(ns, name string) string {
	nsBytes, _ := hex.DecodeString(strings.ReplaceAll(ns, "-", ""))
	h := sha1.Sum(append(nsBytes, name...))
	u := h[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // the RFC variant
	x := hex.EncodeToString(u)
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}
