package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// lstatCounted is the OS filesystem counting each name it is asked to
// Lstat.
type lstatCounted struct {
	vfs.FS
	mu   sync.Mutex
	seen map[string]int
}

func (f *lstatCounted) Lstat(name string) (fs.FileInfo, error) {
	f.mu.Lock()
	f.seen[name]++
	f.mu.Unlock()
	return f.FS.Lstat(name)
}

// A key directory this process has just made, as the root's owner, is not
// looked at again: nothing can be there but what the root's owner put
// there since. One that existed already is looked at (made by another,
// perhaps planted). In both, the revision's name is looked for once, so
// that a writer that lost the race skips its fsync.
func TestMadeKeyDirectoryNotLookedAtAgain(t *testing.T) {
	ctx := context.Background()
	f := &lstatCounted{FS: vfs.OS, seen: map[string]int{}}
	b := New(newRoot(t), &Options{FS: f})
	publishOne(t, b, storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("c3", 16)}, 1, "{}\n") // the root and both kind directories made
	seat := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("a1", 16)}
	session := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("b2", 16)}
	// The session's key directory exists already: another process made it.
	if err := os.Mkdir(b.dir(session), 0o700); err != nil {
		t.Fatal(err)
	}
	looks := func() map[string]int {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := f.seen
		f.seen = map[string]int{}
		return out
	}
	looks()
	ps, errs := b.PrepareBatch(ctx, []storage.PrepareRequest{{Loc: seat, N: 1, Data: []byte("{}\n")}, {Loc: session, N: 1, Data: []byte("{}\n")}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := p.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seen := looks()
	if n := seen[b.dir(seat)]; n != 0 {
		t.Errorf("%s, just made by this process, looked at %d times", b.dir(seat), n)
	}
	if n := seen[b.dir(session)]; n != 1 {
		t.Errorf("%s, which existed, looked at %d times, want once", b.dir(session), n)
	}
	for _, loc := range []storage.Loc{seat, session} {
		if name := filepath.Join(b.dir(loc), storage.RevisionName(1)); seen[name] != 1 {
			t.Errorf("%s looked for %d times before its fsync, want once", name, seen[name])
		}
	}
}

// Where the process is not the root's owner (one given write access to a
// root of uid 0's), a key directory it makes is its own, not the root's
// owner's: it is looked at after the mkdir, and that look refuses it
// (trustInfo) before anything is published in it. Run as that user by
// changing only what the backend believes its effective uid is (the tests
// run as root, so the look finds the directory trusted here).
func TestMadeKeyDirectoryLookedAtByAnotherUser(t *testing.T) {
	old := geteuid
	geteuid = func() int { return 4242 }
	t.Cleanup(func() { geteuid = old })
	ctx := context.Background()
	f := &lstatCounted{FS: vfs.OS, seen: map[string]int{}}
	b := New(newRoot(t), &Options{FS: f})
	publishOne(t, b, storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("c3", 16)}, 1, "{}\n")
	seat := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("a1", 16)}
	ps, errs := b.PrepareBatch(ctx, []storage.PrepareRequest{{Loc: seat, N: 1, Data: []byte("{}\n")}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	ps[0].Abort()
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.seen[b.dir(seat)]; n != 1 {
		t.Errorf("%s, made by a user who does not own the root, looked at %d times after its mkdir, want once", b.dir(seat), n)
	}
}
