package errorfs_test

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

func setup(t *testing.T, rules ...*errorfs.Rule) (*crashfs.FS, *errorfs.FS) {
	t.Helper()
	c := crashfs.New(nil)
	if err := c.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	return c, errorfs.Wrap(c, rules...)
}

func TestFailNthOnly(t *testing.T) {
	_, e := setup(t, &errorfs.Rule{Op: errorfs.OpMkdir, Path: errorfs.Contains("/d/"), Nth: 2, Times: 1, Err: syscall.ENOSPC})
	var got []string
	for _, name := range []string{"/d/a", "/d/b", "/d/c"} {
		err := e.Mkdir(name, 0o700)
		got = append(got, name+": "+map[bool]string{true: "ENOSPC", false: "ok"}[errors.Is(err, syscall.ENOSPC)])
	}
	want := []string{"/d/a: ok", "/d/b: ENOSPC", "/d/c: ok"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := e.Lstat("/d/b"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed mkdir made the directory: %v", err)
	}
}

func TestFailAfterDoesTheCall(t *testing.T) {
	c, e := setup(t, &errorfs.Rule{Op: errorfs.OpLink, Kind: errorfs.FailAfter, Err: syscall.EEXIST})
	tf, err := e.CreateTemp("/d", 0o400)
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.Link("/d/r1"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Link: %v, want EEXIST", err)
	}
	if ok, err := tf.Is("/d/r1"); err != nil || !ok {
		t.Errorf("Is after a lost link reply: %v, %v; want true", ok, err)
	}
	if _, ok := c.Tree()["/d/r1"]; !ok {
		t.Errorf("the link was not made")
	}
}

func TestTornAndShortWrites(t *testing.T) {
	c, e := setup(t,
		&errorfs.Rule{Op: errorfs.OpWrite, Kind: errorfs.Torn, Err: syscall.ENOSPC, Times: 1},
		&errorfs.Rule{Op: errorfs.OpWrite, Kind: errorfs.ShortWrite, Nth: 2, Times: 1})
	tf, err := e.CreateTemp("/d", 0o400)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tf.Write([]byte("abcd")); n != 2 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("torn write = %d, %v; want 2, ENOSPC", n, err)
	}
	if n, err := tf.Write([]byte("wxyz")); n != 2 || err != nil {
		t.Errorf("short write = %d, %v; want 2, nil", n, err)
	}
	if err := tf.Link("/d/f"); err != nil {
		t.Fatal(err)
	}
	if got := string(c.Files("/d")["/d/f"]); got != "abwx" {
		t.Errorf("file holds %q, want %q", got, "abwx")
	}
}

func TestHide(t *testing.T) {
	c, e := setup(t, &errorfs.Rule{Kind: errorfs.Hide, Path: errorfs.Suffix("/b")})
	for _, p := range []string{"/d/a", "/d/b"} {
		if err := c.WriteFile(p, []byte("x"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	names, err := e.ReadDir("/d")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a"}, names); diff != "" {
		t.Errorf("ReadDir (-want +got):\n%s", diff)
	}
	if _, err := e.Lstat("/d/b"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat of a hidden name: %v", err)
	}
	if _, _, err := e.ReadFile("/d/b"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a hidden name: %v", err)
	}
	if got := len(e.Injected()); got != 3 {
		t.Errorf("%d injections recorded, want 3", got)
	}
}

func TestOnInjectDropsPageCache(t *testing.T) {
	var c *crashfs.FS
	c, e := setup(t, &errorfs.Rule{Op: errorfs.OpSync, Kind: errorfs.Fail, OnInject: func(errorfs.Op, string) { c.DropPending("/d/f") }})
	tf, err := e.CreateTemp("/d", 0o400)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tf.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := tf.Link("/d/f"); err != nil {
		t.Fatal(err)
	}
	if err := tf.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync: %v, want EIO", err)
	}
	if b, _, _ := c.ReadFile("/d/f"); len(b) != 0 {
		t.Errorf("after a failed fsync that lost the write, the file reads %q", b)
	}
}
