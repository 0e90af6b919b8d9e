//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile, in DataDir, is held by the serve running on the embedded
// default there, and names its pid.
const lockFile = "serve.lock"

// lockDataDir takes DataDir for this serve alone. The embedded Redis lives
// inside the serve: a second serve on the same SQLite file would rebuild
// the stock into a Redis of its own and sell it again, and its start would
// overwrite the first's redis-addr file. The lock is the process's: it ends
// with it, also on kill -9.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another seckill serve (pid %s) runs on the embedded default in %s: its Redis lives inside it, and a second serve there would sell the stock again; stop it, or give this one another --data-dir",
				strings.TrimSpace(string(pid)), dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is for the message above; the lock, not the file, is what
	// holds.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// killSelf kills this process with SIGKILL, as kill -9 does: the crash
// tests' failpoint.
func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
