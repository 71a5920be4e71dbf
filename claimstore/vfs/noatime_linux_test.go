package vfs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// TestReadsLeaveAccessTimes: OSFS reads a revision and lists a key's
// directory without updating either's access time (the process owns them:
// O_NOATIME is granted), where a plain read of the same file would; a walk
// of a root writes nothing.
func TestReadsLeaveAccessTimes(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	age := func(p string) {
		t.Helper()
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	atime := func(p string) time.Time {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	key, rev, control := filepath.Join(dir, "key"), filepath.Join(dir, "key", "r1"), filepath.Join(dir, "control")
	if err := os.Mkdir(key, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{rev, control} {
		if err := os.WriteFile(p, []byte("{}\n"), 0o400); err != nil {
			t.Fatal(err)
		}
		age(p)
	}
	age(key)
	if _, err := os.ReadFile(control); err != nil {
		t.Fatal(err)
	}
	if atime(control).Equal(old) {
		msg := dir + "'s filesystem updates no access time on a read (noatime?): nothing here could show one left alone"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI's does (relatime)")
		}
		t.Skip(msg)
	}
	if _, _, err := (vfs.OSFS{}).ReadFile(rev); err != nil {
		t.Fatal(err)
	}
	names, err := (vfs.OSFS{}).ReadDir(key)
	if err != nil || len(names) != 1 {
		t.Fatalf("ReadDir = %q, %v", names, err)
	}
	for _, p := range []string{rev, key} {
		if got := atime(p); !got.Equal(old) {
			t.Errorf("%s: access time moved from %v to %v", p, old, got)
		}
	}
}
