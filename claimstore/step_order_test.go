package claimstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
	"github.com/google/go-cmp/cmp"
)

// orderFS is the OS filesystem recording when each write, fsync and link
// of a publish begins and ends, by the key directory it is in. With nudge,
// a write that would follow another temporary's write while no fsync has
// begun waits (briefly) for one to begin: a store that syncs one
// temporary before it writes the other, on any goroutine, is then caught
// doing so every run, not only when the scheduler happens to show it.
type orderFS struct {
	vfs.OSFS
	nudge bool

	mu     sync.Mutex
	cond   *sync.Cond
	events []orderEvent
}

// orderEvent is one call's beginning or end: op is "write", "sync" (a
// temporary's fsync), "link" or "syncdir"; dir is the key directory.
type orderEvent struct {
	op, dir string
	end     bool
}

func newOrderFS(nudge bool) *orderFS {
	f := &orderFS{nudge: nudge}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *orderFS) note(op, dir string, end bool) {
	f.mu.Lock()
	f.events = append(f.events, orderEvent{op, dir, end})
	f.cond.Broadcast()
	f.mu.Unlock()
}

// take returns the events since the last take.
func (f *orderFS) take() []orderEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events
	f.events = nil
	return ev
}

func (f *orderFS) beginWrite(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wrote, synced := false, false
	for _, e := range f.events {
		wrote = wrote || e.op == "write" && e.dir != dir
		synced = synced || e.op == "sync"
	}
	if f.nudge && wrote && !synced {
		deadline := time.Now().Add(50 * time.Millisecond)
		go func() { time.Sleep(50 * time.Millisecond); f.note("tick", "", true) }()
		for !synced && time.Now().Before(deadline) {
			f.cond.Wait()
			for _, e := range f.events {
				synced = synced || e.op == "sync"
			}
		}
	}
	f.events = append(f.events, orderEvent{"write", dir, false})
}

func (f *orderFS) SyncDir(name string) error {
	f.note("syncdir", name, false)
	defer f.note("syncdir", name, true)
	return f.OSFS.SyncDir(name)
}

// SyncDirs keeps the directories' fsyncs in view: the OS's, promoted,
// would make them without SyncDir.
func (f *orderFS) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

func (f *orderFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.OSFS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return &orderTemp{TempFile: t, f: f, dir: dir}, nil
}

type orderTemp struct {
	vfs.TempFile
	f   *orderFS
	dir string
}

func (t *orderTemp) Write(p []byte) (int, error) {
	t.f.beginWrite(t.dir)
	defer t.f.note("write", t.dir, true)
	return t.TempFile.Write(p)
}

func (t *orderTemp) Sync() error {
	t.f.note("sync", t.dir, false)
	defer t.f.note("sync", t.dir, true)
	return t.TempFile.Sync()
}

func (t *orderTemp) Link(name string) error {
	t.f.note("link", filepath.Dir(name), false)
	defer t.f.note("link", filepath.Dir(name), true)
	return t.TempFile.Link(name)
}

// Stat keeps the production path: the OS's temporaries are FileStaters.
func (t *orderTemp) Stat() (fs.FileInfo, error) { return t.TempFile.(vfs.FileStater).Stat() }

// checkStepOrder checks one step's events: both temporaries written before
// either is fsynced, both fsynced before the seat link, the seat's
// directory fsynced before the session link. It returns what is wrong.
func checkStepOrder(events []orderEvent, seatDir, sessionDir string) []string {
	first := map[string]int{} // "begin op dir" / "end op dir" -> first index
	last := map[string]int{}
	for i, e := range events {
		k := fmt.Sprintf("%v %s %s", e.end, e.op, e.dir)
		if _, ok := first[k]; !ok {
			first[k] = i
		}
		last[k] = i
	}
	at := func(m map[string]int, end bool, op, dir string) (int, bool) {
		i, ok := m[fmt.Sprintf("%v %s %s", end, op, dir)]
		return i, ok
	}
	var bad []string
	before := func(what string, endOp, endDir string, beginOp, beginDir string) {
		e, ok1 := at(last, true, endOp, endDir)
		b, ok2 := at(first, false, beginOp, beginDir)
		if !ok1 || !ok2 {
			bad = append(bad, fmt.Sprintf("%s: %s of %s or %s of %s missing", what, endOp, endDir, beginOp, beginDir))
		} else if e > b {
			bad = append(bad, what)
		}
	}
	for _, w := range []string{seatDir, sessionDir} {
		for _, s := range []string{seatDir, sessionDir} {
			before(fmt.Sprintf("write in %s ends before the fsync of %s's temporary begins", filepath.Base(filepath.Dir(w)), filepath.Base(filepath.Dir(s))), "write", w, "sync", s)
		}
		before(fmt.Sprintf("the fsync of %s's temporary ends before the seat link", filepath.Base(filepath.Dir(w))), "sync", w, "link", seatDir)
	}
	before("the seat directory's fsync ends before the session link", "syncdir", seatDir, "link", sessionDir)
	before("the seat link ends before the session link", "link", seatDir, "link", sessionDir)
	return bad
}

// TestStepTemporariesSyncedTogether: in every step (acquire, advance,
// release) both temporaries are written before either is fsynced — a
// temporary written while the other's fsync commits costs a journal
// commit of its own —, and no link comes before both fsyncs have
// returned, nor the session's before the seat directory's fsync; on a
// sequential store and on one that overlaps (where the nudge makes an
// interleaving show every run).
func TestStepTemporariesSyncedTogether(t *testing.T) {
	for _, seq := range []bool{true, false} {
		t.Run(fmt.Sprint("sequential=", seq), func(t *testing.T) {
			rec := newOrderFS(!seq)
			s := openStore(t, newRoot(t), &TOpts{FS: rec, Sequential: seq})
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			seatDir, sessionDir := s.KeyDir(seat), s.KeyDir(session)
			steps := []struct {
				name string
				run  func(*Claim) (*Claim, error)
			}{
				{"acquire", func(*Claim) (*Claim, error) {
					return s.Acquire(context.Background(), seat, session, fields(t, s))
				}},
				{"advance", func(c *Claim) (*Claim, error) {
					return c, s.Advance(context.Background(), c, Patch{State: Active})
				}},
				{"release", func(c *Claim) (*Claim, error) {
					return c, s.Release(context.Background(), c, NewProof(ProofNoUnit, ""))
				}},
			}
			var c *Claim
			for _, st := range steps {
				var err error
				if c, err = st.run(c); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				events := rec.take()
				for _, bad := range checkStepOrder(events, seatDir, sessionDir) {
					t.Errorf("%s: not so: %s; events %v", st.name, bad, events)
				}
			}
		})
	}
}

// A step whose seat link fails (EIO, nothing linked) leaves the claim at
// the revisions it had, so that the same call can be retried: the claim
// counts a revision as its own only once it was linked.
func TestFailedLinkLeavesTheClaimRetryable(t *testing.T) {
	efs := errorfs.Wrap(vfs.OS)
	s := openStore(t, newRoot(t), &TOpts{FS: efs})
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	efs.Add(&errorfs.Rule{Op: errorfs.OpLink, Path: errorfs.Contains(seat.Hash()), Kind: errorfs.Fail, Times: 1})
	if err := s.Advance(context.Background(), c, Patch{State: Active}); err == nil {
		t.Fatal("Advance with a failing seat link succeeded")
	}
	if c.SeatRev != 1 || c.SessionRev != 1 {
		t.Errorf("claim at %d/%d after a link that failed, want 1/1", c.SeatRev, c.SessionRev)
	}
	if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
		t.Fatalf("Advance again: %v", err)
	}
	if diff := cmp.Diff(revNames(2), dirNames(t, s, seat)); diff != "" {
		t.Errorf("seat entries (-want +got):\n%s", diff)
	}
}

// publish refuses a revision larger than the read side accepts even when
// no step's checkSize ran before it: nothing is linked.
func TestPublishRefusesAnOversizeRevision(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	k := sessionKey(t, "x")
	f := fields(t, s)
	f.Fields = map[string]any{"huge": strings.Repeat("w", MaxFileSize)}
	rec, err := s.newRecord(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.publish(context.Background(), k, 1, rec); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("publish of a %d-byte member: %v, want ErrRecordTooLarge", MaxFileSize, err)
	}
	if names := dirNames(t, s, k); len(names) != 0 {
		t.Errorf("%v holds %v after a refused publish", k, names)
	}
}
