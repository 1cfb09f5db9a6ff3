package serverproc

import "syscall"

// childAttr makes the kernel kill the server if the runner itself dies
// without cleaning up (SIGKILL, a crash); with group, the server leads a
// process group of its own, which Stop and Kill signal whole. The
// parent-death signal reaches the direct child only: what it started (the
// service under `sh -c`, `npm start`) outlives a runner killed outright,
// and a process that left the group (setsid) every kill of the group; only
// a cgroup would hold them.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}
