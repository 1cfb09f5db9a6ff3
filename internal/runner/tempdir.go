package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// tempPrefix starts the name of every runner's temp folder.
const tempPrefix = "idemlab-runner-"

// lockName is the file in a runner's temp folder it holds an exclusive
// flock(2) on while it runs. The kernel releases the lock however the
// runner dies, so a lock another process can take proves it gone.
const lockName = "lock"

// makeTemp sweeps parent of the temp folders of runners that are gone,
// then makes this runner's own, locked; release removes it.
func makeTemp(parent string) (dir string, swept []string, release func(), err error) {
	swept = sweepTemp(parent)
	dir, err = os.MkdirTemp(parent, tempPrefix)
	if err != nil {
		return "", swept, nil, fmt.Errorf("make temp folder: %w", err)
	}
	f, err := lockFile(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", swept, nil, fmt.Errorf("make temp folder %s: %w", dir, err)
	}
	return dir, swept, func() {
		os.RemoveAll(dir)
		f.Close()
	}, nil
}

// lockFile makes dir's lock file, locked under another name and renamed,
// so that no sweeper ever sees it unlocked.
func lockFile(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	_, err = fmt.Fprintf(f, "%d\n", os.Getpid()) // for people; the lock is the proof
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, lockName))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepTemp removes and returns the folders parent/idemlab-runner-* whose
// runner is gone; one without a lock file (being made), one whose lock is
// held, a symlink or anything unclear is kept.
func sweepTemp(parent string) []string {
	dirs, _ := filepath.Glob(filepath.Join(parent, tempPrefix+"*"))
	var swept []string
	for _, dir := range dirs {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		if gone(dir) {
			if err := os.RemoveAll(dir); err == nil {
				swept = append(swept, dir)
			}
		}
	}
	return swept
}

// gone reports whether dir's lock file exists and can be locked (until the
// file closes): its runner is gone.
func gone(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
