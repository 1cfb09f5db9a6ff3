package zoo_test

import "syscall"

// procAttr puts a child in a process group of its own that dies with the
// test binary.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
