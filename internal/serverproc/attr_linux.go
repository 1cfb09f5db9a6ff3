package serverproc

import "syscall"

// childAttr makes the kernel kill the server if the runner itself dies
// without cleaning up (SIGKILL, a crash), so no server outlives it; with
// group, the server leads a process group of its own, which Stop and Kill
// signal whole.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}
