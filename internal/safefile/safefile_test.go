package safefile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileTrust: what a bare descriptor reads is what os.File read:
// a regular file whole; a FIFO, a directory or a device refused with its
// path and type and without blocking; a symlink refused (ELOOP) unless
// Follow; a missing file an *fs.PathError wrapping ENOENT.
func TestReadFileTrust(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(reg, 100, nil); err != nil || string(b) != "hello\n" {
		t.Errorf("ReadFile(regular) = %q, %v", b, err)
	}
	for _, c := range []struct {
		name, want string
	}{{fifo, "a FIFO"}, {dir, "a directory"}, {"/dev/null", "a character device"}} {
		_, err := ReadFile(c.name, 100, nil)
		var pe *fs.PathError
		if !errors.Is(err, ErrWrongType) || !errors.As(err, &pe) || pe.Path != c.name || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%s) = %v, want a type error naming it as %s", c.name, err, c.want)
		}
	}
	if _, err := ReadFile(link, 100, nil); !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), link) {
		t.Errorf("ReadFile(symlink) = %v, want ELOOP naming it", err)
	}
	if b, err := ReadFile(link, 100, &Options{Follow: true}); err != nil || string(b) != "hello\n" {
		t.Errorf("ReadFile(symlink, Follow) = %q, %v", b, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := ReadFile(missing, 100, nil); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("ReadFile(missing) = %v, want ENOENT naming it", err)
	}
}

// TestReadFileBounds: at most limit+1 bytes are read, whatever the file's
// size, so a caller sees "too large" without holding the file; a /proc
// file, whose size fstat gives as 0, is read whole.
func TestReadFileBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	big := bytes.Repeat([]byte("x"), 100000)
	if err := os.WriteFile(p, big, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{0, 1, 255, 511, 512, 4096, 99999, 100000, 200000} {
		b, err := ReadFile(p, limit, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(limit+1, int64(len(big))); int64(len(b)) != want {
			t.Errorf("limit %d: read %d bytes, want %d", limit, len(b), want)
		}
	}
	want, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	got, err := ReadFile("/proc/self/status", 1<<20, nil)
	if err != nil || !bytes.HasPrefix(got, []byte("Name:")) || len(got) < len(want)/2 {
		t.Errorf("ReadFile(/proc/self/status) = %d bytes, %v; os.ReadFile read %d", len(got), err, len(want))
	}
}

// TestReadCheckedSeesOpenedFile: the check is asked about the file that
// was opened (its type and size), and its answer is returned as it is,
// before anything is read.
func TestReadCheckedSeesOpenedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("12345"), 0o400); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("refused")
	var mode fs.FileMode
	var size int64
	_, err := ReadChecked(p, 100, nil, func(m fs.FileMode, st *syscall.Stat_t) error { mode, size = m, st.Size; return stop })
	if err != stop || !mode.IsRegular() || mode.Perm() != 0o400 || size != 5 {
		t.Errorf("ReadChecked = %v; check saw %v, %d", err, mode, size)
	}
}

func TestFileMode(t *testing.T) {
	for _, c := range []struct {
		m    uint32
		want fs.FileMode
	}{
		{syscall.S_IFREG | 0o644, 0o644},
		{syscall.S_IFDIR | 0o700, fs.ModeDir | 0o700},
		{syscall.S_IFIFO | 0o600, fs.ModeNamedPipe | 0o600},
		{syscall.S_IFLNK | 0o777, fs.ModeSymlink | 0o777},
		{syscall.S_IFSOCK, fs.ModeSocket},
		{syscall.S_IFCHR, fs.ModeDevice | fs.ModeCharDevice},
		{syscall.S_IFBLK, fs.ModeDevice},
		{syscall.S_IFREG | syscall.S_ISUID | 0o755, fs.ModeSetuid | 0o755},
		{syscall.S_IFREG | syscall.S_ISGID | 0o750, fs.ModeSetgid | 0o750},
		{syscall.S_IFDIR | syscall.S_ISVTX | 0o777, fs.ModeDir | fs.ModeSticky | 0o777},
	} {
		if got := FileMode(c.m); got != c.want {
			t.Errorf("FileMode(%o) = %v, want %v", c.m, got, c.want)
		}
	}
}

// TestSyncDir: a directory is fsynced; a symlink to one, a FIFO or a file
// where it belongs is refused with its path, never opened for reading.
func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, want string }{{link, "a symlink"}, {fifo, "a FIFO"}, {reg, "a regular file"}} {
		err := SyncDir(c.name)
		var pe *fs.PathError
		if !errors.Is(err, ErrWrongType) || !errors.As(err, &pe) || pe.Path != c.name || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SyncDir(%s) = %v, want a type error naming it as %s", c.name, err, c.want)
		}
	}
	if err := SyncDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir(missing) = %v, want ENOENT", err)
	}
}

// SyncFile fsyncs a regular file, and refuses anything else by what it
// is, naming the path, without opening a FIFO for long or following a
// symlink.
func TestSyncFile(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := SyncFile(reg); err != nil {
		t.Fatalf("SyncFile of a regular file: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, want string }{{link, "a symlink"}, {fifo, "a FIFO"}, {dir, "a directory"}} {
		err := SyncFile(c.name)
		var pe *fs.PathError
		if !errors.Is(err, ErrWrongType) || !errors.As(err, &pe) || pe.Path != c.name || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SyncFile(%s) = %v, want a type error naming it as %s", c.name, err, c.want)
		}
	}
	if err := SyncFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncFile(missing) = %v, want ENOENT", err)
	}
	// A failed fsync is reported, naming the file: procfs's regular files
	// refuse fsync (EINVAL), as no disk's file can be made to on demand.
	const status = "/proc/self/status"
	if _, err := os.Lstat(status); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no %s on CI's machine: %v", status, err)
		}
		t.Skipf("no procfs here (%v): a failed fsync cannot be provoked", err)
	}
	err := SyncFile(status)
	var pe *fs.PathError
	if !errors.Is(err, syscall.EINVAL) || !errors.As(err, &pe) || pe.Op != "sync" || pe.Path != status {
		t.Errorf("SyncFile(%s) = %v, want its fsync's failure (EINVAL) naming it", status, err)
	}
}
