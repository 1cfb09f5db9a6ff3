package audit

import "idemlab/internal/audit/strict"

// The audit reads every JSON document with package strict (its one strict
// reader, which the runner checks its inputs and outputs with too): these
// are the names the audit's checks use for it.

// A jsonCap bounds a document's values and objects (strict.Caps).
type jsonCap = strict.Caps

// decodeJSON decodes exactly one JSON value strictly (strict.Decode).
func decodeJSON(data []byte, caps jsonCap) (any, error) { return strict.Decode(data, caps) }

// jsonRefusal words a refusal of decodeJSON for a failure line.
func jsonRefusal(err error) string { return strict.Refusal(err) }
