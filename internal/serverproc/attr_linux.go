package serverproc

import "syscall"

// childAttr makes the kernel kill the server if the runner itself dies
// without cleaning up (SIGKILL, a crash), so no server outlives it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
