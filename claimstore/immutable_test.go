package claimstore

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A key directory that files cannot be created in — made immutable with
// chattr +i — fails a step with what is wrong and what to do, not only
// "operation not permitted", and publishes nothing.
func TestImmutableKeyDirectoryIsExplained(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	dir := s.KeyDir(session)
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		why := "chattr +i cannot be run here (it needs root and a filesystem with attributes): " + strings.TrimSpace(string(out)) + ": " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	err := s.Advance(context.Background(), c, Patch{State: Active})
	if err == nil {
		t.Fatal("Advance into an immutable key directory succeeded")
	}
	for _, want := range []string{dir, "immutable or append-only", "lsattr -d", "nothing was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if c.SeatRev != 1 || c.SessionRev != 1 {
		t.Errorf("claim moved to %d/%d: a step whose session revision cannot be prepared publishes neither", c.SeatRev, c.SessionRev)
	}
}

// A kind directory made immutable (chattr +i seat/) fails the acquire of a
// new seat, whose key directory cannot be made in it, with what is wrong
// with which directory and what to do, not only "mkdir …: operation not
// permitted"; and publishes nothing on either key.
func TestImmutableKindDirectoryIsExplained(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	mustAcquire(t, s, seatKey(t, "s0"), sessionKey(t, "x0")) // makes seat/ and session/
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	dir := filepath.Dir(s.KeyDir(seat))
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		why := "chattr +i cannot be run here (it needs root and a filesystem with attributes): " + strings.TrimSpace(string(out)) + ": " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	_, err := s.Acquire(context.Background(), seat, session, fields(t, s))
	if err == nil {
		t.Fatal("Acquire of a seat whose key directory cannot be made succeeded")
	}
	for _, want := range []string{"the directory " + dir + " does not let anything be created in it", "immutable or append-only", "lsattr -d " + dir, "chattr -i " + dir, "nothing was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	for _, k := range []Key{seat, session} {
		if h, err := s.Head(context.Background(), k); err != nil || h.N != 0 {
			t.Errorf("%v after the refused acquire: head %+v, %v; want no revision", k, h, err)
		}
	}
}
