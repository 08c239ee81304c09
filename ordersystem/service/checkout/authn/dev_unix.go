//go:build unix

package authn

import (
	"io/fs"
	"os"
	"syscall"
)

// foreignOwner reports the owner uid of fi when it is not the current
// process's effective user.
func foreignOwner(fi fs.FileInfo) (uid int, foreign bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), int(st.Uid) != os.Geteuid()
}
