package audit

import (
	"fmt"
	"io"
	"os"
	"slices"

	"idemlab/internal/audit/digest"
	"idemlab/internal/audit/strict"
)

// The audit's caps, all in one place: each input's bytes (a file over its
// cap is refused unread) and each JSON document's values and objects
// (jsonCap), so that no evidence folder or checkout, however hostile, can
// make the audit's memory grow without bound. Each cap is above the most
// the lab can write (docs/bounds.md) and far above what it writes (in
// parentheses: the committed evidence). A decoded document takes ~330
// bytes an object and ~30 a number, so the caps of values and objects
// bound it; the audit keeps only the bytes its checks still read
// (keptFiles), hashes the others as a stream and reads a chaos history
// line by line.
//
// Measured at the caps by testdata/worstcase.sh (each worst case of
// worstcase_test.go under /usr/bin/time -v, 2 shared cores): a peak RSS of
// 194 MB at most, every file at its caps at once (4.5 s of CPU). Before
// these caps (fb85c4c) the same inputs took up to 6 GB or ran out of
// memory.
const (
	CapManifest  = 1 << 20   // manifest.json (16 KB): ~90 bytes per source file
	CapResults   = 8 << 20   // results.json (100 KB): ~230 bytes per call, ~36,000 calls
	CapRun       = 32 << 20  // run.json (197 KB): server log lines, ~2 times results.json
	CapReport    = 8 << 20   // REPORT.md (52 KB): one table row per call
	CapRetries   = 64 << 10  // retries.json (3 KB): thirteen rows
	CapJitter    = 1 << 20   // jitter.json (6 KB): a fixed model's buckets
	CapSVG       = 4 << 20   // jitter.svg (42 KB): a fixed model's bars
	CapStatement = 1 << 20   // statement.intoto.json (9 KB): ~150 bytes per evidence and case file
	CapHistory   = 256 << 20 // a chaos history (0.7 MB): see below
	CapSource    = 4 << 20   // any one source, case or schema file (the largest is go.sum)
	CapOther     = 1 << 20   // chaos.json (20 KB) and any other file named in manifest.files
	CapVerdicts  = 8 << 20   // verdicts.json (~200 KB): a line per call-free finding

	// The targets' files (in parentheses, a plain run of 21 cases on three
	// targets: 63 rows, 26 of them run).
	CapTargets       = 48 << 20 // targets.json (13.6 MB: 2,400 runs, 10 trials on 13 targets): ~6 KB per run with its details, at most 6,000 runs (runner.MaxTargetRuns)
	CapTargetsReport = 8 << 20  // TARGETS.md (26 KB): one table row per call
	CapTargetFile    = 64 << 10 // a target folder's target.json (1 KB), the lab's own bound
	// A target's lock file and the folder whose digest the audit re-derives
	// are bounded by package digest (MaxLockBytes, MaxFolderFiles and
	// MaxFolderBytes), the lab's own bounds.
)

// MemoryLimit is the soft memory limit cmd/audit sets unless GOMEMLIMIT
// does: the caps bound what the audit keeps, the limit the garbage beside
// it (206 MB at the worst case without it).
const MemoryLimit = 192 << 20

// CapHistory: a 10-minute soak stops at 300,000 attempts (internal/chaos
// MaxHistory), ~340 bytes a line, about 100 MB; 256 MiB is 2.5 times that.
// The audit keeps ~140 bytes per intent and 50 per acknowledgement, not
// the lines, each at most maxHistoryLine bytes.
const maxHistoryLine = 64 << 10

// The caps of each JSON document, the lab's own in parentheses (values,
// objects). The runner writes at most 30,000 calls a run (docs/bounds.md):
// results.json then holds about 280,000 values and 35,000 objects, run.json
// 240,000 and 42,000.
var (
	capManifestJSON = jsonCap{Values: 50_000, Objects: 1_000}    // manifest.json (370, 6): a value per source and evidence file
	capResultsJSON  = jsonCap{Values: 400_000, Objects: 100_000} // results.json (3,957, 493): ~9 values and an object a call
	capRunJSON      = jsonCap{Values: 400_000, Objects: 100_000} // run.json (3,472, 598): ~8 values and 1.4 objects a call
	capRetriesJSON  = jsonCap{Values: 5_000, Objects: 1_000}     // retries.json (125, 15): thirteen rows
	capJitterJSON   = jsonCap{Values: 50_000, Objects: 1_000}    // jitter.json (5,531, 6): a fixed model's buckets
	capChaosJSON    = jsonCap{Values: 50_000, Objects: 10_000}   // chaos.json (600, 106): ~200 values a store, its 100 findings listed
	capCaseJSON     = jsonCap{Values: 600_000, Objects: 350_000} // a case file (~40, ~10): whatever the runner's 1 MiB can hold, 2 bytes a value, 3 an object
	capLineJSON     = jsonCap{Values: 1 << 16, Objects: 1 << 14} // a chaos history line (17, 1), at most 64 KiB
	capTargetsJSON  = jsonCap{Values: 800_000, Objects: 200_000} // targets.json (~14,000, ~3,000 for 63 rows): ~250 values a run with its details
	capTargetJSON   = jsonCap{Values: 5_000, Objects: 1_000}     // a target.json (~60, ~10), within its 64 KiB
	capEnvelopeJSON = jsonCap{Values: 100, Objects: 20}          // statement.intoto.dsse.json (9, 2): at most 16 signatures
	capVerdictsJSON = jsonCap{Values: 600_000, Objects: 200_000} // verdicts.json (6,944, 1,090 on 13 targets): ~40 values a judged run
)

// jsonCaps gives each evidence JSON document its caps.
var jsonCaps = map[string]jsonCap{
	"manifest.json": capManifestJSON, "results.json": capResultsJSON, "run.json": capRunJSON,
	RetriesFile: capRetriesJSON, JitterFile: capJitterJSON, ChaosFile: capChaosJSON,
	TargetsFile: capTargetsJSON, VerdictsFile: capVerdictsJSON,
}

// fileCaps gives each evidence file its cap of bytes; others get CapOther.
var fileCaps = map[string]int64{
	"manifest.json": CapManifest, "results.json": CapResults, "run.json": CapRun, "REPORT.md": CapReport,
	RetriesFile: CapRetries, JitterFile: CapJitter, JitterSVGFile: CapSVG, StatementFile: CapStatement,
	TargetsFile: CapTargets, TargetsReportFile: CapTargetsReport, VerdictsFile: CapVerdicts,
}

// capOf returns the size cap of evidence file name.
func capOf(name string) int64 {
	if c, ok := fileCaps[name]; ok {
		return c
	}
	if _, _, ok := subjectOf(name); ok { // a chaos history or timeline
		return CapHistory
	}
	return CapOther
}

// The refusals of a file the audit reads, as package digest words them.
var errNotRegular, errSymlink = digest.ErrNotRegular, digest.ErrSymlink

// A tooLargeError is a file over its cap.
type tooLargeError struct{ size, limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%d bytes, over the cap of %d bytes", e.size, e.limit)
}

// readInside reads the regular file at the slash path rel inside dir, as
// openInside opens it (no symlink followed, no FIFO or device, nothing over
// limit bytes), reading at most limit+1 bytes even if it grows meanwhile.
func readInside(dir, rel string, limit int64) ([]byte, error) {
	f, err := openInside(dir, rel, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readUpTo(f, min(fi.Size(), limit), limit)
}

// readUpTo reads r to its end into a buffer sized for the expected
// bytes (io.ReadAll would grow it by doubling, and leave twice the room
// in garbage), refusing more than limit bytes.
func readUpTo(r io.Reader, expected, limit int64) ([]byte, error) {
	data := make([]byte, 0, expected+1) // one more: the read that finds the end
	for {
		if len(data) == cap(data) { // the file grew while being read
			data = slices.Grow(data, 1)
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			return nil, &tooLargeError{int64(len(data)), limit}
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// checkDir returns an error unless dir is a directory, not a symlink.
func checkDir(what, dir string) error {
	switch fi, err := os.Lstat(dir); {
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, dir, unwrapPath(err))
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s %s: %w", what, dir, errSymlink)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: not a directory", what, dir)
	}
	return nil
}

// The audit reads every JSON document with package strict (its one strict
// reader, which the runner checks its inputs and outputs with too): these
// are the names the audit's checks use for it.

// A jsonCap bounds a document's values and objects (strict.Caps).
type jsonCap = strict.Caps

// decodeJSON decodes exactly one JSON value strictly (strict.Decode).
func decodeJSON(data []byte, caps jsonCap) (any, error) { return strict.Decode(data, caps) }

// jsonRefusal words a refusal of decodeJSON for a failure line.
func jsonRefusal(err error) string { return strict.Refusal(err) }
