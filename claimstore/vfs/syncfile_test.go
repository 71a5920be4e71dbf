package vfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// OS's SyncFile fsyncs a regular file by name, and refuses anything else
// with ErrNotRegular, naming the path and what is there.
func TestOSSyncFile(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "r0000000001.json")
	if err := os.WriteFile(reg, []byte("{}\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	fsy, ok := OS.(FileSyncer)
	if !ok {
		t.Fatal("OS is no FileSyncer")
	}
	if err := fsy.SyncFile(reg); err != nil {
		t.Fatalf("SyncFile of a regular file: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, what string }{{fifo, "a FIFO"}, {link, "a symlink"}, {dir, "a directory"}} {
		err := fsy.SyncFile(c.name)
		var pe *fs.PathError
		if !errors.Is(err, ErrNotRegular) || !errors.As(err, &pe) || pe.Path != c.name || !strings.Contains(err.Error(), c.what) {
			t.Errorf("SyncFile(%s) = %v, want ErrNotRegular naming it as %s", c.name, err, c.what)
		}
	}
	if err := fsy.SyncFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncFile of a missing file: %v, want ErrNotExist", err)
	}
}
