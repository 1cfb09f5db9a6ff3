package sinktest

import "syscall"

// childAttr makes the kernel kill a target when the test binary that
// started it dies, so that no target outlives its test.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
