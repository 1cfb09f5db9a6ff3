//go:build !linux

package serverproc

import "syscall"

// childAttr has no parent-death signal outside Linux; the runner's own
// cleanup paths still kill every server. With group, the server leads a
// process group of its own.
func childAttr(group bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: group} }

// watchdogSupported: the watchdog reads /proc, which only Linux has.
const watchdogSupported = false

func watchdogAttr() *syscall.SysProcAttr { return nil }
