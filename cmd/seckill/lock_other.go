//go:build !unix

package main

import "os"

// lockDataDir does not lock on this system: run one serve per DataDir.
func lockDataDir(dir string) (unlock func(), err error) {
	return func() {}, nil
}

// killSelf ends this process at once: the crash tests' failpoint.
func killSelf() {
	os.Exit(137)
}
