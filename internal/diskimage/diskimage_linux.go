package diskimage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Options configures Make. nil means defaults.
type Options struct {
	// Size is the filesystem's size in bytes (0: 64 MiB).
	Size int64
	// Journal says whether the ext4 has a journal (mkfs.ext4's default);
	// false makes one without, as this project's development machine
	// mounts its root filesystem.
	Journal bool
}

// FS is an ext4 filesystem on a loop device, mounted at Dir until the
// test ends.
type FS struct {
	// Dir is where the filesystem is mounted.
	Dir string
	// Dev is its loop device.
	Dev string

	img     string // the loop device's backing file
	size    int64
	journal bool
}

// chunk is how much of the device Crash copies at a time.
const chunk = 1 << 20

// Make makes an ext4 filesystem in a file under t.TempDir, attaches it to
// a loop device and mounts it; it is unmounted and detached in t.Cleanup.
// Where the machine cannot (not root, a tool or loop devices missing) it
// skips the test, or fails it when CI is set.
func Make(t testing.TB, opts *Options) *FS {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	size := opts.Size
	if size == 0 {
		size = 64 << 20
	}
	if size%chunk != 0 {
		t.Fatalf("diskimage: size %d is not a multiple of %d", size, chunk)
	}
	if err := available(); err != nil {
		unavailable(t, err)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	args := []string{"-q", "-F", "-b", "4096"}
	if !opts.Journal {
		args = append(args, "-O", "^has_journal")
	}
	if err := run("mkfs.ext4", append(args, img)...); err != nil {
		t.Fatalf("diskimage: %v", err)
	}
	f := &FS{Dir: filepath.Join(dir, "mnt"), img: img, size: size, journal: opts.Journal}
	dev, err := f.attachAndMount(img, f.Dir)
	if err != nil {
		t.Fatalf("diskimage: %v", err)
	}
	f.Dev = dev
	t.Cleanup(func() {
		if err := unmountAndDetach(f.Dir, f.Dev); err != nil {
			t.Errorf("diskimage: %v", err)
		}
	})
	return f
}

// Crash returns the filesystem as a crash at this instant leaves it (see
// the package doc): a copy of the device, read past the page cache,
// mounted at a new directory with its journal replayed. unmount unmounts
// it and removes the copy; it is also called in t.Cleanup if the test has
// not. Nothing may write to the filesystem while Crash reads it.
func (f *FS) Crash(t testing.TB) (dir string, unmount func()) {
	t.Helper()
	base := t.TempDir()
	img := filepath.Join(base, "crash.img")
	if err := f.copyDevice(img); err != nil {
		t.Fatalf("diskimage: imaging %s: %v", f.Dev, err)
	}
	dir = filepath.Join(base, "mnt")
	dev, err := f.attachAndMount(img, dir)
	if err != nil {
		t.Fatalf("diskimage: mounting the image of %s as a boot would: %v", f.Dev, err)
	}
	done := false
	unmount = func() {
		if done {
			return
		}
		done = true
		if err := unmountAndDetach(dir, dev); err != nil {
			t.Errorf("diskimage: %v", err)
		}
		_ = os.Remove(img)
	}
	t.Cleanup(unmount)
	return dir, unmount
}

// copyDevice copies what the filesystem has written to its device to
// img, leaving runs of zeros as holes. It reads the loop device's backing
// file, which holds every block written to the device: reading the device
// itself would not do, not even with O_DIRECT, since a direct read first
// writes back the device's dirty cached blocks in its range (on an ext4
// without a journal, every metadata block the filesystem has changed),
// and the image would keep what a crash loses.
func (f *FS) copyDevice(img string) error {
	in, err := os.Open(f.img)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	buf, zero := make([]byte, chunk), make([]byte, chunk)
	for off := int64(0); off < f.size; off += chunk {
		if _, err := in.ReadAt(buf, off); err != nil {
			return err
		}
		if bytes.Equal(buf, zero) {
			continue
		}
		if _, err := out.WriteAt(buf, off); err != nil {
			return err
		}
	}
	if err := out.Truncate(f.size); err != nil {
		return err
	}
	return out.Close()
}

// attachAndMount attaches img to a free loop device and mounts it at dir
// (made here), read-write so that a journal is replayed as at boot, with
// a journal commit interval long enough that no periodic commit writes
// during a test.
func (f *FS) attachAndMount(img, dir string) (dev string, err error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	// Without direct I/O the loop device writes through its backing
	// file's page cache, which copyDevice reads.
	out, err := output("losetup", "--find", "--show", "--direct-io=off", img)
	if err != nil {
		return "", err
	}
	dev = strings.TrimSpace(out)
	mount := []string{"-t", "ext4", dev, dir}
	if f.journal {
		mount = append(mount, "-o", "commit=300")
	}
	if err := run("mount", mount...); err != nil {
		_ = run("losetup", "-d", dev)
		return "", err
	}
	return dev, nil
}

func unmountAndDetach(dir, dev string) error {
	err := run("umount", dir)
	if derr := run("losetup", "-d", dev); err == nil {
		err = derr
	}
	return err
}

// available says why this machine cannot make images, or nil.
func available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root: loop devices and mounts need root")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w (install e2fsprogs and util-linux)", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	return nil
}

// unavailable skips t for err, or fails it when CI is set.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("diskimage: cannot make a filesystem image, and CI is set so this is a failure: %v", err)
	}
	t.Skipf("diskimage: cannot make a filesystem image: %v", err)
}

func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
