package vfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// OSFS.ReadFile's info is the file it read, as os.Lstat describes it: the
// name, size, mode (type and permissions), time, and the stat with the
// owner that a trust check reads. A file whose name is taken by another
// after the read keeps the info of the one read.
func TestReadFileInfoIsTheFileRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r0000000001.json")
	if err := os.WriteFile(p, []byte("first\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	data, info, err := OSFS{}.ReadFile(p)
	if err != nil || string(data) != "first\n" || info == nil {
		t.Fatalf("ReadFile = %q, %v, %v; want its bytes and an info", data, info, err)
	}
	want, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	type described struct {
		Name    string
		Size    int64
		Mode    os.FileMode
		ModTime time.Time
		IsDir   bool
		UID     uint32
		Ino     uint64
	}
	of := func(fi os.FileInfo) described {
		st := fi.Sys().(*syscall.Stat_t)
		return described{fi.Name(), fi.Size(), fi.Mode(), fi.ModTime(), fi.IsDir(), st.Uid, st.Ino}
	}
	if d := cmp.Diff(of(want), of(info)); d != "" {
		t.Errorf("info (-os.Lstat +ReadFile):\n%s", d)
	}
	// Another file put in its place afterwards: the info read is still the
	// first file's.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("second, longer\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(other, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, p); err != nil {
		t.Fatal(err)
	}
	if got := of(info); got.Size != 6 || got.Mode.Perm() != 0o640 || got.Ino != want.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the info read changed with the name: %+v", got)
	}
	for _, tc := range []struct {
		mode uint32
		want os.FileMode
	}{{0o4755, os.ModeSetuid | 0o755}, {0o2750, os.ModeSetgid | 0o750}, {0o1700, os.ModeSticky | 0o700}} {
		if err := syscall.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		if _, info, err := (OSFS{}).ReadFile(p); err != nil || info.Mode() != tc.want {
			t.Errorf("mode %o: ReadFile's info mode %v, %v; want %v", tc.mode, info.Mode(), err, tc.want)
		}
	}
}
