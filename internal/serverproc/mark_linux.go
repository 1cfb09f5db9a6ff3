package serverproc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// killMarked kills every live process but those of process group skip (0:
// none) whose environment carries mark exactly, and returns what it killed
// (strayed), so that an error can name the process. It reads /proc; a
// process it may not read is not the lab's.
func killMarked(mark string, skip int) strayed {
	var killed strayed
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return killed
	}
	want := []byte(MarkEnv + "=" + mark)
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !carries(env, want) {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err == nil && skip != 0 && pgid == skip {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline") // read before the kill: a zombie has none
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed.add(pid, cmdline)
		}
	}
	return killed
}

// carries reports whether the NUL-separated environment env holds the
// entry want.
func carries(env, want []byte) bool {
	for len(env) > 0 {
		kv, rest, _ := bytes.Cut(env, []byte{0})
		if bytes.Equal(kv, want) {
			return true
		}
		env = rest
	}
	return false
}
