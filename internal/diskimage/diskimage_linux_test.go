package diskimage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The premise of an image: what was fsynced (the file and the directory
// naming it) is in it, byte for byte; what was only written is not.
func TestCrashKeepsWhatWasSyncedOnly(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-journal", true: "journal"}[journal], func(t *testing.T) {
			f := Make(t, &Options{Journal: journal})
			dir := filepath.Join(f.Dir, "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			syncDir(t, f.Dir)
			want := []byte("durable\n")
			writeFile(t, filepath.Join(dir, "synced"), want, true)
			syncDir(t, dir)
			writeFile(t, filepath.Join(dir, "unsynced"), []byte("lost\n"), false)

			img, unmount := f.Crash(t)
			defer unmount()
			got, err := os.ReadFile(filepath.Join(img, "d", "synced"))
			if err != nil || string(got) != string(want) {
				t.Errorf("the synced file in the image: %q, %v; want %q", got, err, want)
			}
			if _, err := os.Lstat(filepath.Join(img, "d", "unsynced")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the file never synced is in the image (Lstat: %v): the image read the page cache, not the device", err)
			}
			// The live filesystem still has both: only the image lost one.
			if _, err := os.Lstat(filepath.Join(dir, "unsynced")); err != nil {
				t.Errorf("live: %v", err)
			}
		})
	}
}

func writeFile(t *testing.T, name string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}
