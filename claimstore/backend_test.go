package claimstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
)

// TestPublishModes: revisions are created read-only (0400) and every
// directory on the way (root, kind, key) 0700, whatever the umask.
func TestPublishModes(t *testing.T) {
	// The root's parent is made under the usual umask: with umask 0 it
	// would be 0777, an ancestor Open rightly refuses.
	root := newRoot(t)
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	if err := s.Release(context.Background(), c, NewProof(ProofNoUnit, "")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "seat"), filepath.Join(root, "session"), s.KeyDir(seat), s.KeyDir(session)} {
		fi, err := os.Lstat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want a directory with 0700", dir, fi.Mode())
		}
	}
	for _, k := range []Key{seat, session} {
		if diff := cmp.Diff(revNames(2), dirNames(t, s, k)); diff != "" {
			t.Errorf("%v entries (-want +got):\n%s", k, diff)
		}
		for _, name := range revNames(2) {
			fi, err := os.Lstat(filepath.Join(s.KeyDir(k), name))
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o400 {
				t.Errorf("%v %s: mode %v, want a regular file with 0400", k, name, fi.Mode())
			}
		}
	}
}

// TestPublishExistingRevision: link() is the arbiter; a second publisher of
// a number gets ErrRevisionExists and the first file is left byte for byte.
func TestPublishExistingRevision(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	k := sessionKey(t, "x")
	be := s.Backend()
	first := []byte("first\n")
	if err := be.Publish(context.Background(), k.Loc(), 1, first, nil); err != nil {
		t.Fatal(err)
	}
	var seen []Barrier
	err := be.Publish(context.Background(), k.Loc(), 1, []byte("second\n"), func(b Barrier) error { seen = append(seen, b); return nil })
	if !errors.Is(err, ErrRevisionExists) {
		t.Fatalf("second Publish of revision 1: %v, want ErrRevisionExists", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != filepath.Join(s.KeyDir(k), RevisionName(1)) {
		t.Errorf("error %v does not carry the revision's path", err)
	}
	if got := readRev(t, s, k, 1); !bytes.Equal(got, first) {
		t.Errorf("revision 1 = %q after a lost race, want %q", got, first)
	}
	// The loser saw the name taken before its fsync, and stopped there: it
	// never synced nor linked.
	if diff := cmp.Diff([]Barrier{BarrierTempWritten}, seen); diff != "" {
		t.Errorf("barriers of the losing publish (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(revNames(1), dirNames(t, s, k)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	for _, n := range []uint64{0, MaxRevision + 1} {
		if err := be.Publish(context.Background(), k.Loc(), n, first, nil); err == nil {
			t.Errorf("Publish of revision %d succeeded; it is out of range", n)
		}
	}
}

// TestForeignFilesInKeyDirectory: names that are not revisions (a
// reference writer's crashed temporary, an operator's note, near-miss names)
// are ignored by Head and reported by List as other.
func TestForeignFilesInKeyDirectory(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	k := sessionKey(t, "x")
	writeRev(t, s, k, 1, refRecord(k, 1, testClaimID, "active").bytes())
	dir := s.KeyDir(k)
	others := []string{".tmp-0123456789abcdef", "notes.txt", "r1.json", "r0000000009.json.bak", "r0000000000.json"}
	for _, name := range others {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := s.Head(context.Background(), k)
	if err != nil || h.N != 1 || h.Damage != nil || h.State() != Active {
		t.Fatalf("Head = %+v, %v; want revision 1, active", h, err)
	}
	revs, other, err := s.Backend().List(context.Background(), k.Loc())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1}, revs); diff != "" {
		t.Errorf("List revs (-want +got):\n%s", diff)
	}
	wantOther := []string{".tmp-0123456789abcdef", "notes.txt", "r0000000000.json", "r0000000009.json.bak", "r1.json", "subdir"}
	if diff := cmp.Diff(wantOther, other); diff != "" {
		t.Errorf("List other (-want +got):\n%s", diff)
	}
}

// TestHeadAssumesDenseHistory documents a limit of Head: it probes names
// instead of listing, so a gap made outside the protocol hides the
// revisions above it. Revisions (which lists) shows the gap. The protocol
// never makes gaps; fsck is what reports them.
func TestHeadAssumesDenseHistory(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	k := sessionKey(t, "x")
	for _, n := range []uint64{1, 2, 3, 5} {
		writeRev(t, s, k, n, refRecord(k, n, testClaimID, "active").bytes())
	}
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if h.N != 3 {
		t.Errorf("Head over the gap 1,2,3,_,5 = revision %d; the dense-history probe finds 3", h.N)
	}
	revs, err := s.Revisions(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, r := range revs {
		if r.Damage != nil {
			t.Errorf("revision %d: %v", r.N, r.Damage)
		}
		got = append(got, r.N)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3, 5}, got); diff != "" {
		t.Errorf("Revisions (-want +got):\n%s", diff)
	}

	// With no gap the probe finds the head at every length, across the
	// gallop's powers of two.
	k2 := sessionKey(t, "dense")
	for n := uint64(1); n <= 70; n++ {
		writeRev(t, s, k2, n, refRecord(k2, n, testClaimID, "active").bytes())
		fresh := openStore(t, s.Root(), nil) // no hint: a cold probe
		for _, st := range []*Store{s, fresh} {
			h, err := st.Head(context.Background(), k2)
			if err != nil || h.N != n || h.Damage != nil {
				t.Fatalf("Head with %d revisions = %+v, %v", n, h, err)
			}
		}
	}
}

// TestHeadHintFollowsOtherWriters: the per-store hint only says where to
// start probing; a head moved by another store (or shrunk by tampering) is
// still found.
func TestHeadHintFollowsOtherWriters(t *testing.T) {
	root := newRoot(t)
	a, b := openStore(t, root, nil), openStore(t, root, nil)
	k := sessionKey(t, "x")
	for n := uint64(1); n <= 3; n++ {
		if err := b.Backend().Publish(context.Background(), k.Loc(), n, refRecord(k, n, testClaimID, "active").bytes(), nil); err != nil {
			t.Fatal(err)
		}
		if h, err := a.Head(context.Background(), k); err != nil || h.N != n {
			t.Fatalf("a.Head after b published %d = %+v, %v", n, h, err)
		}
	}
	for n := uint64(2); n <= 3; n++ {
		if err := os.Remove(filepath.Join(a.KeyDir(k), RevisionName(n))); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := a.Head(context.Background(), k); err != nil || h.N != 1 {
		t.Fatalf("a.Head after revisions 2 and 3 were removed = %+v, %v; want 1", h, err)
	}
}

// TestUnreadableHeadIsDamaged: a revision name that is a directory, a FIFO
// or a symlink cannot be read (chmod does not stop root, these do). The head
// is damaged and holds the key as uncertain; the store never follows the
// symlink, even to a valid record, and does not block on the FIFO.
func TestUnreadableHeadIsDamaged(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string, valid []byte)
	}{
		{"directory", func(t *testing.T, path string, _ []byte) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path string, _ []byte) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to a valid record", func(t *testing.T, path string, valid []byte) {
			target := filepath.Join(t.TempDir(), "elsewhere.json")
			if err := os.WriteFile(target, valid, 0o400); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, path string, _ []byte) {
			if err := os.Symlink(filepath.Join(t.TempDir(), "missing"), path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, newRoot(t), nil)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			// Revision 1 is a release: alone it would leave the key free.
			writeRev(t, s, session, 1, refRecord(session, 1, testClaimID, "stopped").set("proof", `{"kind":"no-unit","ref":null}`).bytes())
			tt.make(t, filepath.Join(s.KeyDir(session), RevisionName(2)), refRecord(session, 2, testClaimID, "stopped").set("proof", `{"kind":"no-unit","ref":null}`).bytes())

			h, err := s.Head(context.Background(), session)
			if err != nil {
				t.Fatalf("Head: %v", err)
			}
			if h.N != 2 || h.Record != nil || !errors.Is(h.Damage, ErrUnsafePath) {
				t.Errorf("Head = {N:%d Record:%v Damage:%v}; want revision 2, damaged with ErrUnsafePath", h.N, h.Record, h.Damage)
			}
			if !h.Held() || h.State() != Uncertain {
				t.Errorf("damaged head: Held %v, State %s; want held, uncertain", h.Held(), h.State())
			}
			revs, err := s.Revisions(context.Background(), session)
			if err != nil {
				t.Fatal(err)
			}
			if len(revs) != 2 || revs[0].Damage != nil || !errors.Is(revs[1].Damage, ErrUnsafePath) {
				t.Errorf("Revisions = %+v; want 1 valid, 2 damaged", revs)
			}
			before := dirFiles(t, s, session)
			_, err = s.Acquire(context.Background(), seat, session, fields(t, s))
			var r *Refusal
			if !errors.As(err, &r) || r.Code != UnsafeReplacement {
				t.Errorf("Acquire over a damaged head: %v, want refusal %s", err, UnsafeReplacement)
			}
			if diff := cmp.Diff(before, dirFiles(t, s, session)); diff != "" {
				t.Errorf("the refused Acquire changed the session key (-want +got):\n%s", diff)
			}
			if names := dirNames(t, s, seat); len(names) != 0 {
				t.Errorf("the refused Acquire published on the seat: %v", names)
			}
		})
	}
}

// TestKeyDirectoryNotADirectory: a key directory that is a symlink (even to
// a valid history) or a plain file is never followed: Head fails with
// ErrUnsafePath naming the path, and Acquire fails without writing.
func TestKeyDirectoryNotADirectory(t *testing.T) {
	for _, kind := range []string{"symlink", "file"} {
		t.Run(kind, func(t *testing.T) {
			root := newRoot(t)
			s := openStore(t, root, nil)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			dir := s.KeyDir(session)
			if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "history")
			if kind == "symlink" {
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(target, RevisionName(1)), refRecord(session, 1, testClaimID, "stopped").set("proof", `{"kind":"no-unit","ref":null}`).bytes(), 0o400); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, dir); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}

			_, err := s.Head(context.Background(), session)
			what := map[string]string{"symlink": "it is a symlink", "file": "it is a regular file, not a directory"}[kind]
			if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), what) {
				t.Errorf("Head: %v; want ErrUnsafePath naming %s and saying %q", err, dir, what)
			}
			if _, _, err := s.Backend().List(context.Background(), session.Loc()); !errors.Is(err, ErrUnsafePath) {
				t.Errorf("List: %v; want ErrUnsafePath", err)
			}
			if _, err := s.Pair(context.Background(), seat, session); !errors.Is(err, ErrUnsafePath) {
				t.Errorf("Pair: %v; want ErrUnsafePath", err)
			}
			c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
			if err == nil || c != nil {
				t.Fatalf("Acquire through a %s key directory succeeded", kind)
			}
			if !errors.Is(err, ErrUnsafePath) && !errors.As(err, new(*Refusal)) {
				t.Errorf("Acquire: %v; want ErrUnsafePath or a refusal", err)
			}
			if kind == "symlink" {
				ents, _ := os.ReadDir(target)
				if len(ents) != 1 {
					t.Errorf("Acquire wrote through the symlink: %v", ents)
				}
			}
			if names := dirNames(t, s, seat); len(names) != 0 {
				t.Errorf("Acquire published on the seat: %v", names)
			}
		})
	}
}

func TestLocs(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	if locs, err := s.Backend().Locs(context.Background(), KindSeat); err != nil || len(locs) != 0 {
		t.Fatalf("Locs on an empty root = %v, %v", locs, err)
	}
	a, b := sessionKey(t, "a"), sessionKey(t, "b")
	for _, k := range []Key{a, b} {
		writeRev(t, s, k, 1, refRecord(k, 1, testClaimID, "active").bytes())
	}
	if err := os.WriteFile(filepath.Join(s.Root(), "session", "README"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	locs, err := s.Backend().Locs(context.Background(), KindSession)
	if err != nil {
		t.Fatal(err)
	}
	want := []Loc{a.Loc(), b.Loc()}
	if want[0].Hash > want[1].Hash {
		want[0], want[1] = want[1], want[0]
	}
	if diff := cmp.Diff(want, locs); diff != "" {
		t.Errorf("Locs (-want +got):\n%s", diff)
	}
}

// TestReadMissingRevision: a missing revision is fs.ErrNotExist through the
// *fs.PathError, so callers can tell it from damage.
func TestReadMissingRevision(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	k := sessionKey(t, "x")
	_, err := s.Backend().Read(context.Background(), k.Loc(), 1)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Errorf("Read of a missing revision: %v; want a *fs.PathError wrapping fs.ErrNotExist", err)
	}
	if h, err := s.Head(context.Background(), k); err != nil || h.N != 0 || h.Held() || h.State() != Stopped {
		t.Errorf("Head of a key without history = %+v, %v; want free", h, err)
	}
}

// sizeFS is the OS filesystem with a directory size of its choosing, to
// drive the cold probe's estimate wrong in both directions.
type sizeFS struct {
	vfs.OSFS
	size int64
}

func (f sizeFS) ProbeDir(dir string) (func(string) (bool, error), int64, func() error, error) {
	exists, _, closeDir, err := f.OSFS.ProbeDir(dir)
	return exists, f.size, closeDir, err
}

// TestProbeFromAnyEstimate: a cold Head finds the head whatever the
// directory's size suggests (an estimate only changes the probes' number).
func TestProbeFromAnyEstimate(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	for _, revs := range []uint64{1, 2, 3, 17, 100, 1000} {
		k := sessionKey(t, fmt.Sprint("k", revs))
		for n := uint64(1); n <= revs; n++ {
			writeRev(t, s, k, n, refRecord(k, n, testClaimID, "active").bytes())
		}
		for _, size := range []int64{0, 4096, 4097, 24 * 4, 24 * 1000, 24 * 100000, 1 << 40} {
			st, err := OpenRoot(root, &TOpts{FS: sizeFS{size: size}, Host: thisHost})
			if err != nil {
				t.Fatal(err)
			}
			h, err := st.Head(context.Background(), k)
			if err != nil || h.N != revs || h.Record == nil {
				t.Errorf("%d revisions, directory size %d: Head = %+v, %v", revs, size, h, err)
			}
		}
	}
}
