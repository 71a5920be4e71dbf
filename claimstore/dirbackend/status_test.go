package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/crashfs"
)

// A status record is written under status/, read back, and replaced by
// the next write, leaving nothing else in the directory; the record is a
// 0400 file, status/ a 0700 directory, as revisions and key directories.
func TestStatusWriteReadReplace(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	b, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadStatus(ctx, "walk"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadStatus of a root that does not exist: %v, want fs.ErrNotExist", err)
	}
	for _, data := range []string{"first\n", "second, longer than the first\n", "3\n"} {
		if err := b.WriteStatus(ctx, "walk", []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := b.ReadStatus(ctx, "walk")
		if err != nil || string(got) != data {
			t.Fatalf("ReadStatus after writing %q: %q, %v", data, got, err)
		}
		names, err := os.ReadDir(filepath.Join(root, "status"))
		if err != nil || len(names) != 1 || names[0].Name() != "walk.json" {
			t.Fatalf("status/ holds %v (%v), want walk.json alone", names, err)
		}
	}
	for path, want := range map[string]fs.FileMode{filepath.Join(root, "status"): fs.ModeDir | 0o700, filepath.Join(root, "status", "walk.json"): 0o400} {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	// Other names are refused, reading and writing, before anything is
	// touched.
	for _, name := range []string{"", "Walk", "../seat", "a/b", ".tmp-x", "a.json", strings.Repeat("a", 101)} {
		if err := b.WriteStatus(ctx, name, []byte("x")); err == nil || !strings.Contains(err.Error(), "not a status record name") {
			t.Errorf("WriteStatus(%q): %v", name, err)
		}
		if _, err := b.ReadStatus(ctx, name); err == nil || !strings.Contains(err.Error(), "not a status record name") {
			t.Errorf("ReadStatus(%q): %v", name, err)
		}
	}
	if err := b.WriteStatus(ctx, "big", make([]byte, MaxFileSize+1)); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("WriteStatus of %d bytes: %v", MaxFileSize+1, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.WriteStatus(cctx, "walk", []byte("late\n")); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteStatus with a cancelled context: %v", err)
	}
	if _, err := b.ReadStatus(cctx, "walk"); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadStatus with a cancelled context: %v", err)
	}
	if got, _ := b.ReadStatus(ctx, "walk"); string(got) != "3\n" {
		t.Errorf("after the refusals the record is %q", got)
	}
}

// A status record is read as a revision is: never through a symlink
// (status/ or the record), never from a directory or file others may
// write, never a file larger than a record may be.
func TestStatusReadRefusesUntrusted(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Backend, string) {
		root := newRoot(t)
		b, err := Open(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteStatus(ctx, "walk", []byte("ok\n")); err != nil {
			t.Fatal(err)
		}
		return b, root
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "walk.json"), []byte("planted\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, root string)
		want  string
	}{
		{"status/ a symlink", func(t *testing.T, root string) {
			mustRun(t, os.RemoveAll(filepath.Join(root, "status")))
			mustRun(t, os.Symlink(elsewhere, filepath.Join(root, "status")))
		}, "it is a symlink"},
		{"the record a symlink", func(t *testing.T, root string) {
			mustRun(t, os.Remove(filepath.Join(root, "status", "walk.json")))
			mustRun(t, os.Symlink(filepath.Join(elsewhere, "walk.json"), filepath.Join(root, "status", "walk.json")))
		}, "symlink"},
		{"status/ writable by others", func(t *testing.T, root string) {
			mustRun(t, os.Chmod(filepath.Join(root, "status"), 0o777))
		}, "lets group or others write it"},
		{"the record writable by others", func(t *testing.T, root string) {
			mustRun(t, os.Chmod(filepath.Join(root, "status", "walk.json"), 0o666))
		}, "lets group or others write it"},
		{"the record too large", func(t *testing.T, root string) {
			p := filepath.Join(root, "status", "walk.json")
			mustRun(t, os.Chmod(p, 0o600))
			mustRun(t, os.WriteFile(p, make([]byte, MaxFileSize+1), 0o600))
		}, "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := setup(t)
			tc.spoil(t, root)
			got, err := b.ReadStatus(ctx, "walk")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadStatus: %q, %v; want an error saying %q", got, err, tc.want)
			}
		})
	}
}

func mustRun(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A status write is atomic and durable at every crash: stopped after each
// of its filesystem calls in turn, every state a power cut can leave then
// holds the record before it, whole, or the new one, whole (and after the
// write returned, the new one); a later write after the crash succeeds.
// Run over a root with no record yet too: there the record is absent or
// whole.
func TestStatusWriteAtEveryCrash(t *testing.T) {
	const root = "/data/claims"
	for _, old := range []string{"", "the walk before, whose record is longer\n"} {
		base := crashfs.New(nil)
		if err := base.MkdirAll("/data", 0o755); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			b := New(root, &Options{FS: base, Sequential: true})
			if err := b.WriteStatus(context.Background(), "walk", []byte(old)); err != nil {
				t.Fatal(err)
			}
			if err := base.SyncFS("/"); err != nil {
				t.Fatal(err)
			}
		}
		const next = "the new walk\n"
		read := func(f *crashfs.FS) string {
			got, err := New(root, &Options{FS: f}).ReadStatus(context.Background(), "walk")
			if errors.Is(err, fs.ErrNotExist) {
				return ""
			}
			if err != nil {
				t.Fatalf("ReadStatus after a crash: %v", err)
			}
			return string(got)
		}
		states := 0
		for k := 1; ; k++ {
			f := base.Fork()
			f.StopAfter(k)
			err := New(root, &Options{FS: f, Sequential: true}).WriteStatus(context.Background(), "walk", []byte(next))
			if err == nil {
				cs, _, err := f.CrashStates(crashfs.ModelSubset, 4096)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cs {
					if got := read(c); got != next {
						t.Fatalf("a crash after WriteStatus returned leaves %q, want the new record", got)
					}
				}
				break
			}
			if !errors.Is(err, crashfs.ErrStopped) {
				t.Fatalf("stopped after %d calls: %v", k, err)
			}
			cs, _, err := f.CrashStates(crashfs.ModelSubset, 4096)
			if err != nil {
				t.Fatalf("stop %d: %v", k, err)
			}
			for _, c := range cs {
				states++
				if got := read(c); got != old && got != next {
					t.Fatalf("stop %d: a crash leaves the record %q, neither the old %q nor the new %q", k, got, old, next)
				}
				if err := New(root, &Options{FS: c}).WriteStatus(context.Background(), "walk", []byte("again\n")); err != nil {
					t.Fatalf("stop %d: writing after the crash: %v", k, err)
				}
				if got := read(c); got != "again\n" {
					t.Fatalf("stop %d: after the crash and a new write the record is %q", k, got)
				}
			}
		}
		if states == 0 {
			t.Fatal("no crash state was checked")
		}
		t.Logf("old record %q: %d crash states checked", old, states)
	}
}

// fsck's layout check knows status/: a record is checked as a revision file
// is (type, trust, mode), a temporary a cut write left is a temporary, and
// anything else is foreign; a status/ that is a symlink is reported and
// never listed through. A root holding only status/ is a claim root.
func TestStatusLayout(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	b, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteStatus(ctx, "walk", []byte("ok\n")); err != nil {
		t.Fatal(err)
	}
	if err := NotClaimRoot(root, []string{"status"}); err != nil {
		t.Errorf("a root holding only status/: %v", err)
	}
	dir := filepath.Join(root, "status")
	mustRun(t, os.WriteFile(filepath.Join(dir, statusTempPrefix+"0123"), []byte("cut"), 0o400))
	mustRun(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("n"), 0o400))
	mustRun(t, os.WriteFile(filepath.Join(dir, "other.json"), []byte("{}\n"), 0o644))
	findings := func() []string {
		var out []string
		if err := b.CheckLayout(ctx, func(f storage.Finding) {
			out = append(out, string(f.Severity)+" "+f.Kind+" "+strings.TrimPrefix(f.Path, root+"/"))
		}); err != nil {
			t.Fatal(err)
		}
		sort.Strings(out)
		return out
	}
	want := []string{
		"warning foreign-file status/notes.txt",
		"warning temporary status/" + statusTempPrefix + "0123",
		"warning unsafe-path status/other.json",
	}
	if diff := cmp.Diff(want, findings()); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	mustRun(t, os.RemoveAll(dir))
	mustRun(t, os.Symlink(t.TempDir(), dir))
	want = []string{"error unsafe-path status"}
	if diff := cmp.Diff(want, findings()); diff != "" {
		t.Errorf("findings with status/ a symlink (-want +got):\n%s", diff)
	}
	if err := b.WriteStatus(ctx, "walk", []byte("x\n")); err == nil || !errors.Is(err, storage.ErrUnsafePath) {
		t.Errorf("WriteStatus into a symlinked status/: %v, want ErrUnsafePath", err)
	}
}
