package claimstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
	"github.com/google/go-cmp/cmp"
)

// otherUserName is the second local user the trust tests act as. It is
// made with useradd the first time it is needed (tests run as root in CI).
const otherUserName = "claimstore-test"

var otherUserOnce struct {
	sync.Once
	uid, gid int
	err      error
}

// otherUser returns the uid and gid of a second local user, creating it if
// needed. Without root (or without useradd) the test cannot act as another
// user: it skips saying so, except under CI, where it fails.
func otherUser(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set, and this test needs root to act as a second local user")
		}
		t.Skip("needs root to create and act as a second local user")
	}
	otherUserOnce.Do(func() {
		if _, err := user.Lookup(otherUserName); err != nil {
			out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", otherUserName).CombinedOutput()
			if err != nil {
				otherUserOnce.err = errors.New("useradd " + otherUserName + ": " + err.Error() + ": " + string(out))
				return
			}
		}
		u, err := user.Lookup(otherUserName)
		if err != nil {
			otherUserOnce.err = err
			return
		}
		otherUserOnce.uid, _ = strconv.Atoi(u.Uid)
		otherUserOnce.gid, _ = strconv.Atoi(u.Gid)
	})
	if otherUserOnce.err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(otherUserOnce.err)
		}
		t.Skipf("cannot make a second local user: %v", otherUserOnce.err)
	}
	return otherUserOnce.uid, otherUserOnce.gid
}

// asOther runs a command as the second user, with stdin, and returns its
// error with its output.
func asOther(t *testing.T, stdin []byte, name string, args ...string) error {
	t.Helper()
	uid, gid := otherUser(t)
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(err.Error() + ": " + string(out))
	}
	return nil
}

// traversableTempDir returns a temporary directory that the second user
// can reach (go test makes them 0700), for tests where that user acts.
func traversableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	chmod(t, filepath.Dir(dir), 0o755)
	chmod(t, dir, 0o755)
	return dir
}

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// wantUnsafeRoot checks that err refuses the root, naming path.
func wantUnsafeRoot(t *testing.T, err error, path string) {
	t.Helper()
	if !errors.Is(err, ErrUnsafeRoot) {
		t.Fatalf("err = %v, want ErrUnsafeRoot", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod") {
		t.Errorf("error %q does not name %s and the fix", err, path)
	}
}

// An ancestor of the root that others may write into, without a sticky
// bit, lets another user rename the root away (shown here for real, as a
// second user); the next writer would have started an empty root and won
// a claim whose owner still runs. Open refuses such a root, and so does
// the first write when the ancestor became writable after Open.
func TestAncestorChainRenameAttack(t *testing.T) {
	shared := filepath.Join(traversableTempDir(t), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(shared, "claims")
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	mustAcquire(t, s, seat, session)

	chmod(t, shared, 0o777)
	if err := asOther(t, nil, "mv", root, root+".gone"); err != nil {
		t.Fatalf("the second user could not rename the root out of a 0777 parent: %v", err)
	}
	_, err := OpenRoot(root, &TOpts{Host: thisHost})
	wantUnsafeRoot(t, err, shared)
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused Open created the root: %v", err)
	}

	// Sticky: others may write, but not rename what they do not own.
	if err := os.Rename(root+".gone", root); err != nil {
		t.Fatal(err)
	}
	chmod(t, shared, 0o777|fs.ModeSticky)
	if err := asOther(t, nil, "mv", root, root+".gone"); err == nil {
		t.Fatal("the second user renamed the root out of a sticky directory")
	}
	s = openStore(t, root, nil)
	if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, AlreadyActive) {
		t.Fatalf("second acquire: %v, want already-active", err)
	}
}

// An ancestor made writable after Open is caught before the first write.
func TestAncestorCheckedBeforeFirstWrite(t *testing.T) {
	top := t.TempDir()
	mid := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(mid, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(mid, "claims")
	s := openStore(t, root, nil)
	chmod(t, filepath.Join(top, "a"), 0o775)
	_, err := s.Acquire(context.Background(), seatKey(t, "s"), sessionKey(t, "x"), fields(t, s))
	wantUnsafeRoot(t, err, filepath.Join(top, "a"))
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused write created the root: %v", err)
	}
}

// An ancestor that is a symlink is judged by its target's chain as well as
// by the directory holding the link.
func TestAncestorSymlinkTargetChecked(t *testing.T) {
	top := t.TempDir()
	open := filepath.Join(top, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(open, "real")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(top, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(link, "claims")
	openStore(t, root, nil) // every directory on both paths is safe
	chmod(t, open, 0o777)
	_, err := OpenRoot(root, &TOpts{Host: thisHost})
	wantUnsafeRoot(t, err, open)
}

// An ancestor owned by another user (not root) is refused: its owner can
// always make it writable.
func TestAncestorOwnedByAnotherUser(t *testing.T) {
	uid, gid := otherUser(t)
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	_, err := OpenRoot(filepath.Join(dir, "claims"), &TOpts{Host: thisHost})
	if !errors.Is(err, ErrUnsafeRoot) || !strings.Contains(err.Error(), "belongs to uid "+strconv.Itoa(uid)) {
		t.Fatalf("err = %v, want ErrUnsafeRoot naming uid %d", err, uid)
	}
}

// plantStopped is the attack on writable insides: a stopped revision with
// a cohort proof, written on top of k's head by the second user.
func plantStopped(t *testing.T, s *Store, k Key, c *Claim) error {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	rec := c.Record.clone()
	rec.State, rec.Proof = Stopped, NewProof(ProofCohort, "forged")
	rec.Key, rec.Revision, rec.WrittenAt = k, h.N+1, "2024-01-02T03:04:05.678Z"
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.KeyDir(k), RevisionName(h.N+1))
	return asOther(t, data, "sh", "-c", `umask 0377 && cat > "$1"`, "sh", path)
}

// wantHeldUntrusted checks that k reads held and damaged, naming path.
func wantHeldUntrusted(t *testing.T, s *Store, k Key, path string) {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatalf("Head(%v): %v", k, err)
	}
	if !h.Held() || h.State() != Uncertain || h.Damage == nil {
		t.Fatalf("Head(%v) = held %v state %s damage %v; want held, uncertain, damaged", k, h.Held(), h.State(), h.Damage)
	}
	if !errors.Is(h.Damage, ErrUnsafePath) || !strings.Contains(h.Damage.Error(), path) {
		t.Errorf("damage %q does not wrap ErrUnsafePath naming %s", h.Damage, path)
	}
}

// wantFsckError checks that fsck reports path as an error of kind, and
// that --repair changes nothing about it.
func wantFsckError(t *testing.T, s *Store, path, kind string) {
	t.Helper()
	before, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check(context.Background(), &CheckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Path == path && f.Kind == kind && f.Severity == SeverityError && !f.Repairable && !f.Repaired {
			found = true
		}
	}
	if !found {
		t.Errorf("fsck findings %+v lack an unrepairable %s error for %s", rep.Findings, kind, path)
	}
	after, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("fsck --repair removed %s: %v", path, err)
	}
	bs, as := before.Sys().(*syscall.Stat_t), after.Sys().(*syscall.Stat_t)
	if before.Mode() != after.Mode() || bs.Uid != as.Uid || bs.Gid != as.Gid {
		t.Errorf("fsck --repair changed %s: mode %v uid %d -> mode %v uid %d", path, before.Mode(), bs.Uid, after.Mode(), as.Uid)
	}
}

// A key directory others may write into: the second user plants a stopped
// revision with a cohort proof. The key must read held (damaged), a second
// acquire must be refused, and fsck must report the directory and the
// planted file as errors that --repair leaves alone.
func TestWritableKeyDirectoryPlantedRelease(t *testing.T) {
	root := filepath.Join(traversableTempDir(t), "claims")
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	chmod(t, root, 0o755)
	for _, k := range []Key{seat, session} {
		chmod(t, filepath.Dir(s.KeyDir(k)), 0o755)
		chmod(t, s.KeyDir(k), 0o777)
		if err := plantStopped(t, s, k, c); err != nil {
			t.Fatalf("the second user could not plant into a 0777 key directory: %v", err)
		}
	}
	s = openStore(t, root, nil)
	for _, k := range []Key{seat, session} {
		wantHeldUntrusted(t, s, k, s.KeyDir(k))
	}
	if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
		t.Fatalf("acquire over a planted release: %v, want unsafe-replacement", err)
	}
	res, err := s.Classify(context.Background(), seat, session, &ClassifyOptions{Units: absentUnitsLookup{}})
	if err != nil || res.Free() {
		t.Fatalf("classify = %+v, %v; want held", res, err)
	}
	wantFsckError(t, s, s.KeyDir(seat), FindingUntrusted)
	wantFsckError(t, s, filepath.Join(s.KeyDir(seat), RevisionName(2)), FindingUntrusted)
}

type absentUnitsLookup struct{}

func (absentUnitsLookup) LookupUnit(_ context.Context, name string) UnitObservation {
	return UnitObservation{Name: name, State: UnitAbsent, Detail: "test: absent"}
}

// A kind directory (seat/) others may write into holds every key in it,
// even a key with no revision at all: whoever could write there could have
// removed them.
func TestWritableKindDirectoryHoldsEveryKey(t *testing.T) {
	root, s, seat, session := releasedPair(t)
	empty := seatKey(t, "empty")
	if err := os.Mkdir(s.KeyDir(empty), 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, filepath.Join(root, "seat"), 0o733)
	s = openStore(t, root, nil)
	wantHeldUntrusted(t, s, seat, filepath.Join(root, "seat"))
	wantHeldUntrusted(t, s, empty, filepath.Join(root, "seat"))
	// A key with no directory at all is held too: whoever could write
	// seat/ could have removed its directory, history and all.
	wantHeldUntrusted(t, s, seatKey(t, "absent"), filepath.Join(root, "seat"))
	if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
		t.Fatalf("acquire: %v, want unsafe-replacement", err)
	}
	// Nothing is published into a directory others can write.
	before := rootPaths(t, root)
	if _, err := s.Acquire(context.Background(), seatKey(t, "new"), sessionKey(t, "new"), fields(t, s)); !isRefusal(err, UnsafeReplacement) {
		t.Fatalf("acquire of a new key under a writable seat/: %v, want unsafe-replacement", err)
	}
	if diff := cmp.Diff(before, rootPaths(t, root)); diff != "" {
		t.Errorf("a refused acquire under a writable seat/ changed the root (-before +after):\n%s", diff)
	}
	wantFsckError(t, s, filepath.Join(root, "seat"), FindingUntrusted)
	// The operator fixes it: the keys read as before.
	chmod(t, filepath.Join(root, "seat"), 0o700)
	s = openStore(t, root, nil)
	if h, err := s.Head(context.Background(), seat); err != nil || h.Held() {
		t.Fatalf("after chmod: Head = %+v, %v; want free", h, err)
	}
}

// An empty key directory others may write into holds its key.
func TestWritableEmptyKeyDirectoryIsHeld(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	if _, err := s.Acquire(context.Background(), seatKey(t, "a"), sessionKey(t, "a"), fields(t, s)); err != nil {
		t.Fatal(err)
	}
	k := sessionKey(t, "empty")
	if err := os.Mkdir(s.KeyDir(k), 0o722); err != nil {
		t.Fatal(err)
	}
	chmod(t, s.KeyDir(k), 0o722)
	wantHeldUntrusted(t, s, k, s.KeyDir(k))
	if h, _ := s.Head(context.Background(), k); !strings.Contains(h.Damage.Error(), "this directory has mode") {
		t.Errorf("damage %q does not say it is the directory's mode", h.Damage)
	}
}

// A revision owned by another user (restored from a backup as the wrong
// user, or planted by one who could write the directory once) is damaged:
// its owner can rewrite it.
func TestForeignOwnedRevisionIsDamaged(t *testing.T) {
	uid, gid := otherUser(t)
	root, s, seat, session := releasedPair(t)
	head := filepath.Join(s.KeyDir(session), RevisionName(2))
	if err := os.Chown(head, uid, gid); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, root, nil)
	wantHeldUntrusted(t, s, session, head)
	if h, _ := s.Head(context.Background(), session); !strings.Contains(h.Damage.Error(), "this file belongs to uid") {
		t.Errorf("damage %q does not say it is the file's owner", h.Damage)
	}
	if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
		t.Fatalf("acquire: %v, want unsafe-replacement", err)
	}
	wantFsckError(t, s, head, FindingUntrusted)
	// A group- or other-writable revision is damaged too.
	if err := os.Chown(head, 0, 0); err != nil {
		t.Fatal(err)
	}
	chmod(t, head, 0o422)
	s = openStore(t, root, nil)
	wantHeldUntrusted(t, s, session, head)
}

// A symlinked proofs/ directory is never followed: a boot proof from
// elsewhere cannot release a live claim, nor make a stopped head free.
func TestSymlinkedProofsNotFollowed(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)

	// A proof that would verify for this claim, kept outside the root.
	const laterBoot = "99999999-2222-3333-4444-555555555555"
	elsewhere := t.TempDir()
	id := BootProofID(testMachine, testBoot, laterBoot, c.ID)
	bp := `{"version":1,"kind":"boot-proof","id":"` + id + `","claimId":"` + c.ID + `","machineId":"` + testMachine + `","recordedBootId":"` + testBoot + `","currentBootId":"` + laterBoot + `","observedAt":"2024-01-01T00:00:00.000Z"}` + "\n"
	if err := os.WriteFile(filepath.Join(elsewhere, id+".json"), []byte(bp), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, ProofDir)); err != nil {
		t.Fatal(err)
	}
	err := s.Release(context.Background(), c, &Proof{Kind: ProofBoot, Ref: id, raw: bootProofJSON(id)})
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("release on a proof through a symlinked proofs/: %v, want ErrUnsafePath", err)
	}
	if p, err := s.Pair(context.Background(), seat, session); err != nil || !p.Held() {
		t.Fatalf("after the refused release: %+v, %v; want held", p, err)
	}

	// A stopped head naming that proof (written by hand) reads held.
	rec := c.Record.clone()
	rec.State, rec.Proof = Stopped, &Proof{Kind: ProofBoot, Ref: id, raw: bootProofJSON(id)}
	rec.Key, rec.Revision, rec.WrittenAt = session, 2, "2024-01-02T03:04:05.678Z"
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	writeRev(t, s, session, 2, data)
	s = openStore(t, root, nil)
	h, err := s.Head(context.Background(), session)
	if err != nil || !h.Held() || !errors.Is(h.Damage, ErrUnsafePath) {
		t.Fatalf("Head = %+v, %v; want held, damaged by ErrUnsafePath", h, err)
	}
	rep, err := s.Check(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors() == 0 {
		t.Errorf("fsck found no error with a symlinked proofs/: %+v", rep.Findings)
	}
}

// stoppedOnBootProof makes a root whose pair was classified after a reboot
// (stopped with one of this store's boot proofs) and returns the store on
// the new boot, the keys and the proof's path.
func stoppedOnBootProof(t *testing.T) (*Store, Key, Key, string) {
	t.Helper()
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	mustAcquire(t, s, seat, session)
	later := hostid.Override{Host: thisHost, Boot: "99999999-2222-3333-4444-555555555555"}
	s = openStore(t, root, &TOpts{Host: later})
	res, err := s.Classify(context.Background(), seat, session, nil)
	if err != nil || res.Outcome != OutcomeStopped || res.BootProof == nil {
		t.Fatalf("classify after a reboot = %+v, %v; want stopped on a boot proof", res, err)
	}
	return openStore(t, root, &TOpts{Host: later}), seat, session, s.proofPath(res.BootProof.ID)
}

// A stopped head whose boot proof is missing (a root restored without
// proofs/), or does not verify, is damaged: held, unsafe-replacement, in
// Head, Acquire and Classify.
func TestBootProofMissingReadsHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"missing", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"proofs-dir-missing", func(t *testing.T, path string) {
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
		{"other-claim", func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var bp BootProof
			if err := json.Unmarshal(data, &bp); err != nil {
				t.Fatal(err)
			}
			bp.ClaimID = "c" + strings.Repeat("f", 24)
			if data, err = json.Marshal(bp); err != nil {
				t.Fatal(err)
			}
			chmod(t, path, 0o600)
			if err := os.WriteFile(path, data, 0o400); err != nil {
				t.Fatal(err)
			}
		}},
		{"unreadable-garbage", func(t *testing.T, path string) {
			chmod(t, path, 0o600)
			if err := os.WriteFile(path, []byte("{garbage"), 0o400); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, seat, session, path := stoppedOnBootProof(t)
			if p, err := s.Pair(context.Background(), seat, session); err != nil || p.Held() {
				t.Fatalf("with its proof: %+v, %v; want free", p, err)
			}
			tc.damage(t, path)
			s = openStore(t, s.Root(), &TOpts{Host: s.Host()})
			for _, k := range []Key{seat, session} {
				h, err := s.Head(context.Background(), k)
				if err != nil || !h.Held() || h.State() != Uncertain || h.Damage == nil {
					t.Fatalf("Head(%v) = %+v, %v; want held, damaged", k, h, err)
				}
			}
			if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
				t.Fatalf("acquire: %v, want unsafe-replacement", err)
			}
			res, err := s.Classify(context.Background(), seat, session, nil)
			if err != nil || res.Free() || !res.Damaged {
				t.Fatalf("classify = %+v, %v; want uncertain, damaged", res, err)
			}
			sum, err := s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, nil)
			if err != nil || sum.Clean() {
				t.Fatalf("classify --all = %+v, %v; want the pair held", sum, err)
			}
		})
	}
}

// Two classifiers racing on the same claims after a reboot issue one boot
// proof per claim between them: the proof id is derived from what it
// proves, and the loser of the exclusive write reuses the winner's.
func TestConcurrentClassifyIssuesOneProofPerClaim(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	const pairs = 12
	for i := range pairs {
		mustAcquire(t, s, seatKey(t, "s"+strconv.Itoa(i)), sessionKey(t, "x"+strconv.Itoa(i)))
	}
	later := hostid.Override{Host: thisHost, Boot: "99999999-2222-3333-4444-555555555555"}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := openStore(t, root, &TOpts{Host: later})
			sum, err := st.ClassifyAll(context.Background(), nil, nil)
			if err == nil && sum.Errors > 0 {
				err = errors.New("classify --all had errors")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.Backend().Proofs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != pairs {
		t.Fatalf("%d boot proofs for %d claims: %v", len(ids), pairs, ids)
	}
	st := openStore(t, root, &TOpts{Host: later})
	rep, err := st.Check(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Errorf("fsck after racing classifiers: %+v", f)
	}
}

// A boot proof that no revision names is reported by fsck (a warning).
func TestFsckReportsUnusedProof(t *testing.T) {
	s, _, _, _ := stoppedOnBootProof(t)
	rec := &Record{ClaimID: "c" + strings.Repeat("e", 24), Host: Host{MachineID: testMachine, BootID: testBoot}}
	p, err := s.IssueBootProof(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []Finding
	for _, f := range rep.Findings {
		got = append(got, f)
	}
	if len(got) != 1 || got[0].Kind != FindingUnusedProof || got[0].Severity != SeverityWarning || got[0].Path != s.proofPath(p.ID) {
		t.Fatalf("findings = %+v, want one unused-proof warning for %s", got, p.ID)
	}
}

// A proof file under the derived id that proves something else is never
// taken for the proof being issued.
func TestIssueBootProofRefusesSquattedID(t *testing.T) {
	s, _, _, _ := stoppedOnBootProof(t)
	rec := &Record{ClaimID: "c" + strings.Repeat("d", 24), Host: Host{MachineID: testMachine, BootID: testBoot}}
	boot, _ := s.Host().BootID()
	id := BootProofID(testMachine, testBoot, boot, rec.ClaimID)
	other := `{"version":1,"kind":"boot-proof","id":"` + id + `","claimId":"c` + strings.Repeat("a", 24) + `","machineId":"` + testMachine + `","recordedBootId":"` + testBoot + `","currentBootId":"` + boot + `","observedAt":"x"}` + "\n"
	if err := os.WriteFile(s.proofPath(id), []byte(other), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssueBootProof(context.Background(), rec); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("IssueBootProof over a squatted id: %v, want ErrUnsafePath", err)
	}
	// A file at the id that is not a proof at all: an error naming it,
	// never a proof.
	if err := os.Chmod(s.proofPath(id), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.proofPath(id), []byte("not a proof\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if p, err := s.IssueBootProof(context.Background(), rec); err == nil || p != nil || !strings.Contains(err.Error(), "exists but cannot be read") {
		t.Fatalf("IssueBootProof over an unreadable file at its id: %+v, %v; want an error saying it cannot be read", p, err)
	}
}

// A revision (or proof) larger than MaxFileSize is damaged, not read: its
// size is named, and the key is held.
func TestOversizedRevisionIsDamaged(t *testing.T) {
	root, s, seat, session := releasedPair(t)
	// A valid stopped record padded with whitespace past the bound.
	rec := readRev(t, s, session, 2)
	rec = bytes.Replace(rec, []byte(`"revision":2`), []byte(`"revision":3`), 1)
	big := append(bytes.TrimSuffix(rec, []byte("}\n")), bytes.Repeat([]byte(" "), MaxFileSize)...)
	big = append(big, "}\n"...)
	writeRev(t, s, session, 3, big)
	s = openStore(t, root, nil)
	h, err := s.Head(context.Background(), session)
	if err != nil || !h.Held() || h.N != 3 {
		t.Fatalf("Head = %+v, %v; want revision 3 held", h, err)
	}
	if !strings.Contains(h.Damage.Error(), strconv.Itoa(len(big))) {
		t.Errorf("damage %q does not name the size %d", h.Damage, len(big))
	}
	if _, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !isRefusal(err, UnsafeReplacement) {
		t.Fatalf("acquire: %v, want unsafe-replacement", err)
	}
}

// ReadProof fails, naming why, on a proofs/ directory others can write
// (even when the proof in it is well-formed) and on a missing proofs/: a
// caller must never be handed an empty proof to judge.
func TestReadProofRefusals(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	const id = "boot-0123456789abcdef01234567"
	if _, err := s.Backend().ReadProof(context.Background(), id); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadProof with no proofs/: %v, want ErrNotExist", err)
	}
	dir := filepath.Join(root, ProofDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// ReadProof reads; whether the file proves anything is VerifyProof's.
	if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte("{}\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if data, err := s.Backend().ReadProof(context.Background(), id); err != nil || len(data) == 0 {
		t.Fatalf("ReadProof of a trusted proof: %q, %v", data, err)
	}
	chmod(t, dir, 0o777)
	if data, err := s.Backend().ReadProof(context.Background(), id); !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), dir) {
		t.Errorf("ReadProof in a world-writable proofs/: %q, %v; want ErrUnsafePath naming %s", data, err, dir)
	}
}

// No boot proof is written into a proofs/ directory others can write: the
// classification after a reboot fails naming it, and publishes nothing.
func TestNoBootProofIntoWritableProofsDir(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	mustAcquire(t, s, seat, session)
	dir := filepath.Join(root, ProofDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, 0o777)
	before := rootPaths(t, root)
	later := hostid.Override{Host: thisHost, Boot: "99999999-2222-3333-4444-555555555555"}
	s = openStore(t, root, &TOpts{Host: later})
	res, err := s.Classify(context.Background(), seat, session, nil)
	if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("classify after a reboot with a world-writable proofs/ = %+v, %v; want ErrUnsafePath naming %s", res, err, dir)
	}
	if diff := cmp.Diff(before, rootPaths(t, root)); diff != "" {
		t.Errorf("the refused classification changed the root (-before +after):\n%s", diff)
	}
}

// plainReadFS is the OS filesystem with a ReadFile that has no bound of its
// own (a vfs.FS may leave the bound to the store, FS.ReadFile says).
type plainReadFS struct{ vfs.OSFS }

func (plainReadFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	data, err := os.ReadFile(name)
	return data, nil, err
}

// revLstatFailFS is the OS filesystem whose Lstats of revision files fail
// with EIO (a revision read, then its identity unreadable), and whose
// ReadFile gives no file info, so that a reader must Lstat.
type revLstatFailFS struct{ vfs.OSFS }

func (f revLstatFailFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	data, _, err := f.OSFS.ReadFile(name)
	return data, nil, err
}

func (f revLstatFailFS) Lstat(name string) (fs.FileInfo, error) {
	if strings.HasSuffix(name, ".json") {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: syscall.EIO}
	}
	return f.OSFS.Lstat(name)
}

// The store bounds what it reads itself, whatever the filesystem does: a
// revision of exactly MaxFileSize bytes is read, one byte more is damaged
// (its size named); and a revision whose trust cannot be checked after
// reading it is damaged with the reason.
func TestReadFileBoundAndTrustCheck(t *testing.T) {
	root, s, _, session := releasedPair(t)
	rec := readRev(t, s, session, 2)
	exact := append(bytes.TrimSuffix(rec, []byte("}\n")), bytes.Repeat([]byte(" "), MaxFileSize-len(rec))...)
	exact = append(exact, "}\n"...)
	if len(exact) != MaxFileSize {
		t.Fatalf("padded record is %d bytes, want %d", len(exact), MaxFileSize)
	}
	path := filepath.Join(s.KeyDir(session), RevisionName(2))
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, exact, 0o400); err != nil {
		t.Fatal(err)
	}
	for _, fsys := range []vfs.FS{vfs.OSFS{}, plainReadFS{}} {
		h, err := openStore(t, root, &TOpts{FS: fsys}).Head(context.Background(), session)
		if err != nil || h.Held() || h.Damage != nil {
			t.Errorf("%T: Head of a revision of exactly MaxFileSize bytes = %+v, %v; want it read, free", fsys, h, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(exact, ' '), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, fsys := range []vfs.FS{vfs.OSFS{}, plainReadFS{}} {
		h, err := openStore(t, root, &TOpts{FS: fsys}).Head(context.Background(), session)
		if err != nil || !h.Held() || h.Damage == nil || !strings.Contains(h.Damage.Error(), strconv.Itoa(MaxFileSize+1)) {
			t.Errorf("%T: Head of a revision of MaxFileSize+1 bytes = %+v, %v; want damaged, naming its size", fsys, h, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, rec, 0o400); err != nil {
		t.Fatal(err)
	}
	h, err := openStore(t, root, &TOpts{FS: revLstatFailFS{}}).Head(context.Background(), session)
	if err != nil || !h.Held() || !errors.Is(h.Damage, syscall.EIO) {
		t.Errorf("Head of a revision whose Lstat fails = %+v, %v; want held, damaged by EIO", h, err)
	}
}
