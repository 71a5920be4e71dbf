package claimstore

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/diskimage"
)

// TestPowerCutImages checks the crash model's promises against the
// kernel, where the crash suites check the store against the model: a
// lifecycle on a real ext4 (without a journal, as this project's machine
// mounts its root, and with one) on a loop device, the store as it runs in
// production (io_uring, its own descriptors), and at every barrier an
// image of the disk as a crash there leaves it (internal/diskimage),
// opened by a store as after a reboot. In every image:
//   - every revision the protocol has made durable by then (its
//     dir-synced barrier passed) is there: each key's head is at least
//     that revision, and reads back undamaged;
//   - every revision name reads what was published under it, byte for
//     byte;
//   - the seat's head is never behind the session's.
func TestPowerCutImages(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(journalName(journal), func(t *testing.T) {
			for _, v := range powerCutLifecycle(t, nil, journal) {
				t.Error(v)
			}
		})
	}
}

// The images catch what the crash suites' model once missed: an
// O_TMPFILE's link count is written by its own fsync, not by the
// directory's. With SyncLink hidden from the store (temporaries without
// vfs.LinkSyncer), an ext4 without a journal loses revisions the store
// acknowledged: the name is on the disk, the inode it names has no link
// there, and it reads as corrupt.
func TestPowerCutImagesCatchALinkCountLeftInMemory(t *testing.T) {
	violations := powerCutLifecycle(t, hideLinkSync{vfs.OS}, false)
	if len(violations) == 0 {
		t.Fatal("no image lost an acknowledged revision, though no link count was made durable")
	}
	t.Logf("%d violations, the first: %s", len(violations), violations[0])
}

func journalName(journal bool) string {
	if journal {
		return "journal"
	}
	return "no-journal"
}

// powerCutLifecycle runs a lifecycle (acquire, active with a spawn
// marker, stopping, release) on a fresh ext4 through fsys (nil: the
// operating system's, as production runs), imaging the disk at every
// barrier and once at the end, and returns what the images broke of
// TestPowerCutImages's promises.
func powerCutLifecycle(t *testing.T, fsys vfs.FS, journal bool) []string {
	t.Helper()
	img := diskimage.Make(t, &diskimage.Options{Journal: journal})
	root := filepath.Join(img.Dir, "claims")
	seat, session := seatKey(t, "s-powercut"), sessionKey(t, "x-powercut")
	var (
		mu         sync.Mutex
		acked      = map[Kind]uint64{}
		violations []string
	)
	check := func(at string) {
		dir, unmount := img.Crash(t)
		defer unmount()
		for _, v := range checkPowerCutImage(t, root, filepath.Join(dir, "claims"), seat, session, acked) {
			violations = append(violations, at+": "+v)
		}
	}
	barrier := func(p Point) error {
		mu.Lock()
		defer mu.Unlock()
		if p.Barrier == BarrierDirSynced {
			acked[p.Key.Kind] = p.Revision
		}
		check(fmt.Sprintf("a crash at %s of %s revision %d", p.Barrier, p.Key.Kind, p.Revision))
		return nil
	}
	s := openStore(t, root, &TOpts{FS: fsys, Barrier: barrier})
	ctx := context.Background()
	c, err := s.Acquire(ctx, seat, session, fields(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, c, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, c, Patch{State: Stopping}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c, NewProof(ProofCohort, "powercut")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if acked[KindSeat] != 4 || acked[KindSession] != 4 {
		t.Fatalf("the barriers saw revisions %v made durable, want 4 of each key", acked)
	}
	check("a crash after the release returned")
	return violations
}

// checkPowerCutImage returns what the image of the root at imgRoot breaks
// of TestPowerCutImages's promises, the live root being at root and acked
// holding each kind's revision made durable.
func checkPowerCutImage(t *testing.T, root, imgRoot string, seat, session Key, acked map[Kind]uint64) []string {
	t.Helper()
	var out []string
	heads := map[Kind]uint64{}
	if _, err := os.Lstat(imgRoot); err != nil {
		if acked[KindSeat] > 0 || acked[KindSession] > 0 {
			out = append(out, fmt.Sprintf("the root is not in the image (%v), though revisions %v were durable", err, acked))
		}
		return out
	}
	s := openStore(t, imgRoot, nil)
	for _, k := range []Key{seat, session} {
		h, err := s.Head(context.Background(), k)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("the %s head cannot be read: %v", k.Kind, err))
			continue
		case h.Damage != nil:
			out = append(out, fmt.Sprintf("the %s head, revision %d, is damaged: %v", k.Kind, h.N, h.Damage))
		case h.N < acked[k.Kind]:
			out = append(out, fmt.Sprintf("the %s head is revision %d, though revision %d was made durable", k.Kind, h.N, acked[k.Kind]))
		}
		heads[k.Kind] = h.N
	}
	if heads[KindSeat] < heads[KindSession] {
		out = append(out, fmt.Sprintf("the seat's head, revision %d, is behind the session's, %d", heads[KindSeat], heads[KindSession]))
	}
	err := filepath.WalkDir(imgRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out = append(out, fmt.Sprintf("walking the image: %v", err))
			return nil
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "r") || !strings.HasSuffix(d.Name(), ".json") {
			return nil
		}
		rel, _ := filepath.Rel(imgRoot, p)
		got, gerr := os.ReadFile(p)
		want, werr := os.ReadFile(filepath.Join(root, rel))
		switch {
		case gerr != nil:
			out = append(out, fmt.Sprintf("%s cannot be read: %v", rel, gerr))
		case werr != nil:
			out = append(out, fmt.Sprintf("%s is in the image, and not in the live root: %v", rel, werr))
		case !bytes.Equal(got, want):
			out = append(out, fmt.Sprintf("%s reads %q, not what was published under it, %q", rel, got, want))
		}
		return nil
	})
	if err != nil {
		out = append(out, err.Error())
	}
	return out
}

// hideLinkSync is a filesystem whose temporaries have no vfs.LinkSyncer:
// the store leaves their link counts to the directories' fsyncs.
type hideLinkSync struct{ vfs.FS }

func (f hideLinkSync) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.FS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return struct{ vfs.TempFile }{t}, nil
}
