package chaos

import "syscall"

// procAttr makes a child receive SIGKILL when the harness dies, so that a
// killed harness leaves no processes behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
