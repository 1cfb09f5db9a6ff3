//go:build !linux

package serverproc

import "syscall"

// A cgroup is never made outside Linux: the group's kill is all there is.
type cgroup struct{}

const cgroupPrefix = "idemlab-"

// Cgroups reports "": the processes the lab starts here begin in no cgroup
// of their own.
func Cgroups() string { return "" }

func newCgroup(string) *cgroup                                      { return nil }
func (cg *cgroup) attr(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }
func (cg *cgroup) closeFD()                                         {}
func (cg *cgroup) kill(string, int) int                             { return 0 }
func (cg *cgroup) remove() error                                    { return nil }
