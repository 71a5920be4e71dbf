package vfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// TestUnnamedTemp: the O_TMPFILE temporary, held by its bare descriptor,
// writes all it is given, links exclusively, knows itself under a name
// and no other file, gives the identity its name then has, and closes
// once.
func TestUnnamedTemp(t *testing.T) {
	dir := t.TempDir()
	tf, err := vfs.CreateUnnamed(dir, 0o400)
	if errors.Is(err, errors.ErrUnsupported) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s has no O_TMPFILE, which CI's filesystem has", dir)
		}
		t.Skipf("%s has no O_TMPFILE: CreateTemp's named fallback is used there", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"hello ", "world\n"} {
		if n, err := tf.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := tf.Sync(); err != nil {
		t.Fatal(err)
	}
	name, other := filepath.Join(dir, "r1"), filepath.Join(dir, "other")
	if _, err := tf.Is(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Is before the link: %v; want it missing", err)
	}
	if err := tf.Link(name); err != nil {
		t.Fatal(err)
	}
	if err := tf.Link(name); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a second Link: %v; want ErrExist", err)
	}
	if err := os.WriteFile(other, []byte("hello world\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]bool{name: true, other: false} {
		if mine, err := tf.Is(n); err != nil || mine != want {
			t.Errorf("Is(%s) = %v, %v; want %v", n, mine, err, want)
		}
	}
	st, ok := tf.(vfs.FileStater)
	if !ok {
		t.Fatal("the unnamed temporary cannot say its identity (vfs.FileStater)")
	}
	fi, err := st.Stat()
	if err != nil {
		t.Fatal(err)
	}
	li, err := os.Lstat(name)
	if err != nil {
		t.Fatal(err)
	}
	if vfs.Identity(fi) != vfs.Identity(li) || fi.Size() != 12 || fi.Mode() != 0o400 {
		t.Errorf("Stat = %v size %d mode %v; the name has %v", vfs.Identity(fi), fi.Size(), fi.Mode(), vfs.Identity(li))
	}
	if data, err := os.ReadFile(name); err != nil || string(data) != "hello world\n" {
		t.Errorf("linked file holds %q, %v", data, err)
	}
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tf.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("a second Close: %v; want ErrClosed", err)
	}
	// Write and Sync reach the kernel and report what it says: on a
	// descriptor closed, EBADF (a Sync that did not fsync would say nil).
	if _, err := tf.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
	if err := tf.Sync(); err == nil {
		t.Error("Sync after Close succeeded: it did not ask the kernel")
	}
}
