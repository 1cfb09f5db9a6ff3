package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Size caps. The audit reads each input whole, then decodes it; a cap per
// file bounds both, so that no evidence folder, however hostile, can make
// the audit use more than a few hundred MiB (measured: see the closing
// note of issue 8). Each cap is far above what the lab writes today (in
// parentheses, the committed evidence of 18 runs and 188 calls) and far
// below what would hurt: a file over its cap is refused unread.
const (
	CapManifest = 1 << 20  // manifest.json (8 KB): ~90 bytes per source file
	CapResults  = 8 << 20  // results.json (41 KB): ~220 bytes per call, ~38,000 calls
	CapRun      = 32 << 20 // run.json (67 KB): server log lines, ~4 times results.json
	CapReport   = 8 << 20  // REPORT.md (17 KB): one table row per call
	CapRetries  = 64 << 10 // retries.json (1 KB): four rows
	CapJitter   = 1 << 20  // jitter.json (6 KB): a fixed model's buckets
	CapSVG      = 4 << 20  // jitter.svg (42 KB): a fixed model's bars
	CapSource   = 4 << 20  // any one source, case or schema file (the largest is go.sum)
	CapOther    = 1 << 20  // any other file named in manifest.files

	// The targets' files (in parentheses, a plain run of 21 cases on three
	// targets: 63 rows, 26 of them run).
	CapTargets       = 16 << 20 // targets.json (174 KB): ~6 KB per run with its details
	CapTargetsReport = 8 << 20  // TARGETS.md (26 KB): one table row per call
	CapTargetFile    = 64 << 10 // a target folder's target.json (1 KB), the lab's own bound
	CapLockFile      = 16 << 20 // a target's package-lock.json (44 KB), the lab's own bound
	// A target folder whose digest the audit re-derives: at most this many
	// files and bytes (node_modules, .git and the setup marker left out),
	// the lab's own bounds.
	CapFolderFiles = 10000
	CapFolderBytes = 64 << 20
)

// fileCaps gives each evidence file its cap; others get CapOther.
var fileCaps = map[string]int64{
	"manifest.json": CapManifest, "results.json": CapResults, "run.json": CapRun, "REPORT.md": CapReport,
	RetriesFile: CapRetries, JitterFile: CapJitter, "jitter.svg": CapSVG,
	TargetsFile: CapTargets, TargetsReportFile: CapTargetsReport,
}

// capOf returns the size cap of evidence file name.
func capOf(name string) int64 {
	if c, ok := fileCaps[name]; ok {
		return c
	}
	return CapOther
}

var (
	errNotRegular = errors.New("not a regular file")
	errSymlink    = errors.New("a symbolic link (refused: the audit reads only regular files inside its folders)")
)

// A tooLargeError is a file over its cap.
type tooLargeError struct{ size, limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%d bytes, over the cap of %d bytes", e.size, e.limit)
}

// readInside reads the regular file at the slash path rel inside dir,
// refusing a path that leaves dir, any symlink on the way (never followed),
// anything but a regular file (a FIFO or device could block or never
// end), and a file over limit bytes. At most limit+1 bytes are read even
// if the file grows meanwhile.
func readInside(dir, rel string, limit int64) ([]byte, error) {
	if !cleanRel(rel) {
		return nil, errors.New("not a clean relative path")
	}
	parts := strings.Split(rel, "/")
	p := dir
	for i, part := range parts {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			return nil, errSymlink
		case i < len(parts)-1 && !fi.IsDir():
			return nil, errNotRegular
		case i == len(parts)-1 && !fi.Mode().IsRegular():
			return nil, errNotRegular
		case i == len(parts)-1 && fi.Size() > limit:
			return nil, &tooLargeError{fi.Size(), limit}
		}
	}
	return readRegularFile(p, limit)
}

// readRegularFile reads the file at name, which must be a regular file
// (os.Lstat: a symlink is refused) of at most limit bytes.
func readRegularFile(name string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, errSymlink
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if fi.Size() > limit {
		return nil, &tooLargeError{fi.Size(), limit}
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The file opened must be the one checked (no swap in between).
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		return nil, errors.New("changed while being read")
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &tooLargeError{int64(len(data)), limit}
	}
	return data, nil
}

// checkDir returns an error unless dir is a directory that is not a
// symlink.
func checkDir(what, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, unwrapPath(err))
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s %s: %w", what, dir, errSymlink)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s: not a directory", what, dir)
	}
	return nil
}
