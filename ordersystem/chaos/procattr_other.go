//go:build !linux

package chaos

import "syscall"

// procAttr: no parent-death signal outside Linux; a killed harness may leave
// its children running (they stop on SIGTERM).
func procAttr() *syscall.SysProcAttr { return nil }
