package serverproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Where the kernel's cgroup v2 hierarchy is mounted and the runner may make
// cgroups below its own (root, or a subtree delegated to its user), every
// process the lab starts begins in a cgroup of its own (clone3's
// CLONE_INTO_CGROUP), named after its mark. A process leaves its process
// group with setsid and its mark by clearing its environment, but never
// its cgroup: writing cgroup.kill ends it with everything else the
// command started. Elsewhere the group's kill and the mark are all there
// is, and docs/bounds.md says what escapes them.

// A cgroup is the cgroup of one process the lab started.
type cgroup struct {
	dir string
	fd  int // open until the process started (closeFD)
}

// cgroupPrefix begins the name of every cgroup the lab makes.
const cgroupPrefix = "idemlab-"

// cgroupWithin bounds the wait, after a kill, for a cgroup's processes to
// be gone before it is removed.
const cgroupWithin = 2 * time.Second

// cgroupBase is the folder the runner makes its processes' cgroups in:
// its own cgroup's, if it may make cgroups there and start a process in
// one; "" where it cannot (tried once).
var cgroupBase = sync.OnceValue(func() string {
	base, err := findCgroupBase()
	if err != nil {
		return ""
	}
	probe, err := makeCgroup(base, runMark+".probe")
	if err != nil {
		return ""
	}
	cmd := exec.Command("sh", "-c", ":")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: probe.fd}
	err = cmd.Run()
	probe.closeFD()
	if err = errors.Join(err, probe.remove()); err != nil {
		return "" // a cgroup it cannot start in, or remove, is none to use
	}
	return base
})

// Cgroups reports whether the processes the lab starts here each begin in
// a cgroup of their own, and where their cgroups are made ("" when not).
func Cgroups() string { return cgroupBase() }

// findCgroupBase is the folder of this process's cgroup in the cgroup v2
// hierarchy, read from /proc/self/mountinfo and /proc/self/cgroup.
func findCgroupBase() (string, error) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var mount string
	for line := range strings.Lines(string(info)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPER
		f := strings.Fields(line)
		if i := slices.Index(f, "-"); i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
			mount = f[4]
			break
		}
	}
	if mount == "" {
		return "", errors.New("no cgroup2 mount")
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(own)) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok && filepath.IsAbs(path) {
			return filepath.Join(mount, path), nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

// makeCgroup makes the cgroup named after mark in base and opens it.
func makeCgroup(base, mark string) (*cgroup, error) {
	dir := filepath.Join(base, cgroupPrefix+mark)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Rmdir(dir)
		return nil, err
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// newCgroup is the cgroup for the process of mark, or nil where the lab
// makes none (Cgroups) or this one could not be made: the process then
// starts without, as everywhere cgroups are not at hand.
func newCgroup(mark string) *cgroup {
	base := cgroupBase()
	if base == "" {
		return nil
	}
	cg, err := makeCgroup(base, mark)
	if err != nil {
		return nil
	}
	return cg
}

// attr puts the process a starts in cg (none for a nil cg).
func (cg *cgroup) attr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, cg.fd
	}
	return a
}

// closeFD closes the folder's descriptor once the process started.
func (cg *cgroup) closeFD() {
	if cg != nil && cg.fd >= 0 {
		syscall.Close(cg.fd)
		cg.fd = -1
	}
}

// kill kills every process left in cg and returns how many of them had
// escaped both other kills: alive, outside process group pgid (0: none),
// and without mark in their environment, as `env -i setsid` leaves one.
func (cg *cgroup) kill(mark string, pgid int) int {
	if cg == nil {
		return 0
	}
	procs, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs"))
	if err != nil || len(bytes.TrimSpace(procs)) == 0 {
		return 0
	}
	want := []byte(MarkEnv + "=" + mark)
	escaped := 0
	for field := range strings.FieldsSeq(string(procs)) {
		pid, err := strconv.Atoi(field)
		if err != nil || zombie(pid) {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && pgid != 0 && g == pgid {
			continue
		}
		if env, err := os.ReadFile("/proc/" + field + "/environ"); err == nil && !carries(env, want) {
			escaped++
		}
	}
	os.WriteFile(filepath.Join(cg.dir, "cgroup.kill"), []byte("1"), 0)
	return escaped
}

// zombie reports whether pid has exited and awaits its reaping.
func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	_, after, ok := bytes.Cut(stat, []byte(") "))
	return ok && bytes.HasPrefix(after, []byte("Z"))
}

// remove removes cg (and cgroups made below it) once its processes are
// gone, killing what is left, for at most cgroupWithin; one still busy
// then is left, and the error says so.
func (cg *cgroup) remove() error {
	if cg == nil {
		return nil
	}
	cg.closeFD()
	deadline := time.Now().Add(cgroupWithin)
	for {
		err := removeTree(cg.dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", cg.dir, err)
		}
		os.WriteFile(filepath.Join(cg.dir, "cgroup.kill"), []byte("1"), 0)
		time.Sleep(10 * time.Millisecond)
	}
}

// removeTree removes the cgroup dir and the cgroups below it, deepest
// first (a process the lab started may have made its own: a runner run as
// a target). A cgroup's files go with its folder.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err == nil {
		for _, e := range entries {
			if e.IsDir() {
				removeTree(filepath.Join(dir, e.Name()))
			}
		}
	}
	return syscall.Rmdir(dir)
}
