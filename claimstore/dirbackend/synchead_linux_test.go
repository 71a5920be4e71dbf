package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/diskimage"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// withoutFileSyncer is the operating system's filesystem with no
// vfs.FileSyncer: Sync fsyncs the directory alone, as it did before.
type withoutFileSyncer struct{ vfs.FS }

// A revision whose writer died between its link and the fsync that makes
// its link count durable is made readable across a crash by the reader
// that decides on it (Sync): on an ext4 without a journal a directory's
// fsync alone leaves its name on an inode the disk counts no link to,
// which reads as corrupt. With a journal the link and the count are one
// transaction, and the directory's fsync alone is enough.
func TestSyncMakesADeadWritersLinkCountDurable(t *testing.T) {
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("d4", 16)}
	for _, c := range []struct {
		name        string
		journal     bool
		reader      vfs.FS
		wantDamaged bool
	}{
		{"no journal", false, nil, false},
		{"no journal, directory alone", false, withoutFileSyncer{vfs.OS}, true},
		{"journal", true, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := diskimage.Make(t, &diskimage.Options{Journal: c.journal})
			root := filepath.Join(img.Dir, "claims")
			writer := New(root, nil)
			// A history long enough that the head's inode is not in the
			// inode table block of its directory's own inode, which the
			// directory's fsync writes: a key's usual case.
			const head = 40
			for n := uint64(1); n < head; n++ {
				publishOne(t, writer, loc, n, fmt.Sprintf("{\"n\":%d}\n", n))
			}
			died := errors.New("the writer died after its link")
			err := writer.Publish(context.Background(), loc, head, []byte(fmt.Sprintf("{\"n\":%d}\n", head)), func(bar storage.Barrier) error {
				if bar == storage.BarrierLinked {
					return died
				}
				return nil
			})
			if !errors.Is(err, died) {
				t.Fatalf("publish: %v, want the writer's death at its link", err)
			}
			reader := New(root, &Options{FS: c.reader})
			if err := reader.Sync(context.Background(), loc, head); err != nil {
				t.Fatal(err)
			}
			dir, unmount := img.Crash(t)
			defer unmount()
			name := filepath.Join(dir, "claims", "seat", loc.Hash, storage.RevisionName(head))
			data, err := os.ReadFile(name)
			damaged := errors.Is(err, syscall.EUCLEAN) || errors.Is(err, syscall.EBADMSG)
			if c.wantDamaged {
				// The control: without the file's fsync the image must
				// lose the link count, or this test could not tell.
				if !damaged {
					t.Fatalf("with the directory fsynced alone the image read %q, %v; want the link count lost (structure needs cleaning)", data, err)
				}
				return
			}
			if want := fmt.Sprintf("{\"n\":%d}\n", head); err != nil || string(data) != want {
				t.Fatalf("after Sync and a crash the head reads %q, %v; want %q", data, err, want)
			}
		})
	}
}

// Sync fsyncs the head's file only where the filesystem can, and judges
// what the fsync says: a failed fsync fails the store for good, as any
// failed fsync does; a head that is not a regular file, or is gone, is
// refused without an fsync and leaves the store working.
func TestSyncOfTheHeadsFile(t *testing.T) {
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("e5", 16)}
	head := func(root string, n uint64) string {
		return filepath.Join(root, "seat", loc.Hash, storage.RevisionName(n))
	}
	t.Run("fsynced", func(t *testing.T) {
		root := newRoot(t)
		publishOne(t, New(root, nil), loc, 1, "{}\n")
		counted := &syncFileCounted{FS: vfs.OS}
		if err := New(root, &Options{FS: counted}).Sync(context.Background(), loc, 1); err != nil {
			t.Fatal(err)
		}
		if want := []string{head(root, 1)}; len(counted.names) != 1 || counted.names[0] != want[0] {
			t.Errorf("files fsynced %v, want %v", counted.names, want)
		}
	})
	t.Run("own revision", func(t *testing.T) {
		root := newRoot(t)
		counted := &syncFileCounted{FS: vfs.OS}
		b := New(root, &Options{FS: counted})
		publishOne(t, b, loc, 1, "{}\n")
		if err := b.Sync(context.Background(), loc, 1); err != nil {
			t.Fatal(err)
		}
		if len(counted.names) != 0 {
			t.Errorf("files fsynced %v for a revision this backend made durable itself, want none", counted.names)
		}
	})
	t.Run("failed fsync", func(t *testing.T) {
		root := newRoot(t)
		publishOne(t, New(root, nil), loc, 1, "{}\n")
		b := New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncFile, Err: syscall.EIO})})
		if err := b.Sync(context.Background(), loc, 1); !errors.Is(err, storage.ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("Sync: %v, want a failed fsync (EIO)", err)
		}
		if err := b.checkFailed(); !errors.Is(err, storage.ErrSyncFailed) {
			t.Errorf("after a failed fsync of the head the store goes on: %v", err)
		}
	})
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, name string)
		want  error
	}{
		{"fifo", func(t *testing.T, name string) {
			if err := syscall.Mkfifo(name, 0o600); err != nil {
				t.Fatal(err)
			}
		}, vfs.ErrNotRegular},
		{"symlink", func(t *testing.T, name string) {
			if err := os.Symlink("/dev/null", name); err != nil {
				t.Fatal(err)
			}
		}, vfs.ErrNotRegular},
		{"gone", func(t *testing.T, name string) {}, fs.ErrNotExist},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := newRoot(t)
			publishOne(t, New(root, nil), loc, 1, "{}\n")
			c.plant(t, head(root, 2))
			b := New(root, nil)
			err := b.Sync(context.Background(), loc, 2)
			if !errors.Is(err, c.want) {
				t.Fatalf("Sync of a head that is a %s: %v, want %v", c.name, err, c.want)
			}
			if !strings.Contains(err.Error(), head(root, 2)) {
				t.Errorf("the refusal %q does not name the head", err)
			}
			if err := b.checkFailed(); err != nil {
				t.Errorf("a refusal failed the store: %v", err)
			}
		})
	}
}

// syncFileCounted is the operating system's filesystem, noting each file
// it fsyncs by name.
type syncFileCounted struct {
	vfs.FS
	names []string
}

func (f *syncFileCounted) SyncFile(name string) error {
	f.names = append(f.names, name)
	return vfs.OS.(vfs.FileSyncer).SyncFile(name)
}
