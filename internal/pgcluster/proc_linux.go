package pgcluster

import "syscall"

// procAttr returns the attributes of a PostgreSQL process the cluster
// starts: its own process group (a Ctrl-C at the runner's terminal reaches
// the runner, which then stops the server in order, not the server
// directly), the credential to run as (nil: as this process), and the
// signal the kernel sends it when the thread that started it ends — the
// runner's death, on every path (see startLocked).
func procAttr(cred *syscall.Credential, deathSignal syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: deathSignal}
}
