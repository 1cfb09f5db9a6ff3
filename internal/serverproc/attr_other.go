//go:build !linux

package serverproc

import "syscall"

// childAttr has no parent-death signal outside Linux; the runner's own
// cleanup paths still kill every server.
func childAttr() *syscall.SysProcAttr { return nil }
