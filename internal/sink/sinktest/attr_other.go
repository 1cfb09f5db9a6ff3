//go:build !linux

package sinktest

import "syscall"

// childAttr has no parent-death signal outside Linux; each test's cleanup
// still kills its targets.
func childAttr() *syscall.SysProcAttr { return nil }
