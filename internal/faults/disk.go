package faults

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckill/seckill/internal/testenv"
)

// Disk is a small file system of the test's own (a tmpfs), that the test
// fills up and frees again: a database whose files are on it finds the disk
// full, as a server does whose disk filled up, without touching the disk
// other tests use. Mounting needs root: without it the test fails when CI
// is set and skips otherwise.
type Disk struct {
	// Dir is the file system's root.
	Dir string

	t      testing.TB
	mu     sync.Mutex
	filler string
}

// MountDisk mounts a tmpfs of size bytes for the test, owned by owner (a
// user name; "" for the test's own user), and unmounts it when the test
// ends.
func MountDisk(t testing.TB, size int64, owner string) *Disk {
	t.Helper()
	// Under a directory others may enter: a database server reads it as
	// its own user.
	parent, err := os.MkdirTemp("", "seckill-disk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,mode=0755", size)
	if owner != "" {
		u, err := user.Lookup(owner)
		if err != nil {
			t.Fatalf("look up user %s: %v", owner, err)
		}
		opts += ",uid=" + u.Uid + ",gid=" + u.Gid
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		os.RemoveAll(parent)
		msg := fmt.Sprintf("mount a tmpfs for a full disk (needs root): %v: %s", err, out)
		if testenv.CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	d := &Disk{Dir: dir, t: t}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "--lazy", dir).CombinedOutput(); err != nil {
			t.Errorf("unmount %s: %v: %s", dir, err, out)
		}
		os.RemoveAll(parent)
	})
	return d
}

// Fill writes a file that takes every free byte of the disk.
func (d *Disk) Fill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filler != "" {
		return
	}
	f, err := os.CreateTemp(d.Dir, "filler-")
	if err != nil {
		d.t.Fatalf("fill the disk: %v", err)
	}
	d.filler = f.Name()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				d.t.Errorf("fill the disk: %v", err)
			}
			break
		}
	}
	f.Close()
}

// Free removes what Fill wrote.
func (d *Disk) Free() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filler == "" {
		return
	}
	if err := os.Remove(d.filler); err != nil {
		d.t.Errorf("free the disk: %v", err)
	}
	d.filler = ""
}

// Set fills the disk (full) or frees it.
func (d *Disk) Set(full bool) {
	if full {
		d.Fill()
	} else {
		d.Free()
	}
}

// PostgresTablespace moves the tables of the schema of dbURL (a URL of
// PostgresURL) named in tables onto a tablespace on disk, and moves them
// back, and drops the tablespace, when the test ends. disk must be owned
// by the server's user (postgres).
func PostgresTablespace(t testing.TB, dbURL string, disk *Disk, tables ...string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	name := "seckill_ts_" + testenv.Random()
	if _, err := admin.Exec(ctx, "CREATE TABLESPACE "+name+" LOCATION '"+disk.Dir+"'"); err != nil {
		admin.Close(ctx)
		t.Fatalf("create tablespace: %v", err)
	}
	move := func(to string) error {
		for _, table := range tables {
			if _, err := admin.Exec(ctx, "ALTER TABLE "+schema+"."+table+" SET TABLESPACE "+to); err != nil {
				return err
			}
		}
		return nil
	}
	t.Cleanup(func() {
		disk.Free()
		if err := move("pg_default"); err != nil {
			t.Errorf("move the tables back: %v", err)
		}
		if _, err := admin.Exec(ctx, "DROP TABLESPACE "+name); err != nil {
			t.Errorf("drop tablespace: %v", err)
		}
		admin.Close(ctx)
	})
	if err := move(name); err != nil {
		t.Fatalf("move the tables to the tablespace: %v", err)
	}
}
