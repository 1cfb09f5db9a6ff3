package pgcluster

import "syscall"

// procAttr gives a PostgreSQL process its own process group, cred, and a
// parent-death signal (see startLocked).
func procAttr(cred *syscall.Credential, deathSignal syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: deathSignal}
}
