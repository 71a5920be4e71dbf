package testbin

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// ForOtherUser copies the running test binary into a new directory that
// every user may enter (0755), removed when the test ends, and returns the
// copy's path. It fails the test if it cannot.
func ForOtherUser(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(SharedDir(t), filepath.Base(exe))
	if err := Copy(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// SharedDir makes a new directory that every user may enter (0755, where
// t.TempDir's parent is not), removed when the test ends, and returns its
// path. It fails the test if it cannot.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "testbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Copy copies the file from to a new file to, with mode; to must not exist.
func Copy(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
