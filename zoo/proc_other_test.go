//go:build unix && !linux

package zoo_test

import "syscall"

// procAttr puts a child in a process group of its own.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
