//go:build unix

package main

import "syscall"

// openFileLimit returns this process's limit on open files (RLIMIT_NOFILE),
// soft and hard. Since Go 1.19 the os package raises the soft limit to the
// hard one when the program starts, so the two are normally equal: serve
// logs it, and bench checks it against --connections.
func openFileLimit() (soft, hard uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, err
	}
	return uint64(r.Cur), uint64(r.Max), nil
}
