package serverproc

import "syscall"

// childAttr makes the kernel kill the server if the runner itself dies
// without cleaning up (SIGKILL, a crash); with group, the server leads a
// process group of its own, which Stop and Kill signal whole. The
// parent-death signal reaches the direct child only: what it started (the
// service under `sh -c`, `npm start`) and a process that left the group
// (setsid) carry the server's mark instead (mark.go), which the lab and the
// watchdog kill by.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}

// watchdogSupported: the watchdog reads /proc.
const watchdogSupported = true

// watchdogAttr puts the watchdog in a session of its own, without the
// parent-death signal: it must outlive the runner.
func watchdogAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
