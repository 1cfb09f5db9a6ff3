//go:build !linux

package pgcluster

import "syscall"

// procAttr has no parent-death signal outside Linux: there a runner killed
// with SIGKILL leaves its PostgreSQL running; every other path stops it.
func procAttr(cred *syscall.Credential, deathSignal syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
