package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/diskimage"
)

// What a crash leaves of an ext4 without a journal where something was
// not made durable by its own fsync reads as corrupt: a linked O_TMPFILE
// whose link count was never fsynced ("structure needs cleaning"), a new
// directory whose own block was never written ("bad message"). Every read
// of OS says so, naming the path, keeping the errno, and saying what to do.
func TestCorruptReadsSayRunFsck(t *testing.T) {
	img := diskimage.Make(t, &diskimage.Options{Journal: false})
	keys, other := filepath.Join(img.Dir, "keys"), filepath.Join(img.Dir, "other")
	for _, d := range []string{keys, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		mustSyncDir(t, d)
	}
	mustSyncDir(t, img.Dir)
	// A directory made and its parent fsynced, the directory itself not.
	if err := os.Mkdir(filepath.Join(other, "new"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, other)
	// Revisions linked and their directory fsynced, the last one's link
	// count not: the others' made durable (SyncLink), so that its inode is
	// in a block nothing else wrote since.
	const last = 40
	for n := 1; n <= last; n++ {
		tmp, err := CreateUnnamed(keys, 0o400)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tmp.Write([]byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		if err := tmp.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := tmp.Link(filepath.Join(keys, fmt.Sprintf("r%010d.json", n))); err != nil {
			t.Fatal(err)
		}
		if n < last {
			if err := tmp.(LinkSyncer).SyncLink(); err != nil {
				t.Fatal(err)
			}
		}
		mustSyncDir(t, keys)
		_ = tmp.Close()
	}

	dir, unmount := img.Crash(t)
	defer unmount()
	rev := filepath.Join(dir, "keys", fmt.Sprintf("r%010d.json", last))
	exists, _, closeDir, err := OSFS{}.ProbeDir(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDir()
	_, lerr := OS.Lstat(rev)
	_, _, rerr := OS.ReadFile(rev)
	_, perr := exists(filepath.Base(rev))
	serr := OSFS{}.ScanDir(filepath.Join(dir, "other", "new"), func([]byte) {})
	for _, c := range []struct {
		name  string
		err   error
		errno unix.Errno
		path  string
	}{
		{"Lstat", lerr, unix.EUCLEAN, rev},
		{"ReadFile", rerr, unix.EUCLEAN, rev},
		{"ProbeDir", perr, unix.EUCLEAN, rev},
		{"ScanDir", serr, unix.EBADMSG, filepath.Join(dir, "other", "new")},
	} {
		var pe *fs.PathError
		switch {
		case !errors.Is(c.err, c.errno):
			t.Errorf("%s: %v, want %v", c.name, c.err, c.errno)
		case !errors.As(c.err, &pe) || pe.Path != c.path:
			t.Errorf("%s: %v, want a *fs.PathError naming %s", c.name, c.err, c.path)
		case !strings.Contains(c.err.Error(), "fsck"):
			t.Errorf("%s: %v, want it to say to run fsck", c.name, c.err)
		}
	}
	// Another error is left as it was.
	_, err = OS.Lstat(filepath.Join(dir, "missing"))
	if want := fmt.Sprintf("lstat %s: no such file or directory", filepath.Join(dir, "missing")); err == nil || err.Error() != want {
		t.Errorf("Lstat of a missing name: %v, want %q", err, want)
	}
}

func mustSyncDir(t *testing.T, dir string) {
	t.Helper()
	if err := OS.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}
