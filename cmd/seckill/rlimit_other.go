//go:build !unix

package main

import "errors"

// openFileLimit is not known on this system.
func openFileLimit() (soft, hard uint64, err error) {
	return 0, 0, errors.New("no RLIMIT_NOFILE on this system")
}
