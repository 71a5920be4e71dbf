package claimstore_test

import (
	"context"
	"errors"
	"path"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/crashfs"
)

// A copy into a directory root is all or nothing at every crash: the
// copy is stopped after each of its filesystem calls in turn, and in every
// state a power cut can leave then, the destination is either no root at
// all (absent, or empty) or the whole source, byte for byte. A later copy
// into it then succeeds (it starts anew, over what the failed one left).
func TestCopyIsAllOrNothingAtEveryCrash(t *testing.T) {
	const src, dst = "/data/src", "/data/dst"
	base := crashfs.New(nil)
	if err := base.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	host := liveHost()
	s, err := claimstore.OpenRoot(src, &claimstore.TOpts{FS: base, Host: host, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		seat, session := mustKeys(t, i)
		c, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID(byte('a' + i)), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := base.SyncFS("/"); err != nil {
		t.Fatal(err)
	}
	want := base.Files(src)
	rel := func(files map[string][]byte, dir string) map[string]string {
		out := map[string]string{}
		for p, b := range files {
			r, _ := relTo(p, dir)
			out[r] = string(b)
		}
		return out
	}
	whole := rel(want, src)
	copyOn := func(f *crashfs.FS) error {
		from, err := claimstore.OpenRoot(src, &claimstore.TOpts{FS: f, Host: host, Sequential: true})
		if err != nil {
			return err
		}
		to, err := claimstore.OpenRoot(dst, &claimstore.TOpts{FS: f, Host: host, Sequential: true})
		if err != nil {
			return err
		}
		_, err = claimstore.Copy(context.Background(), to.Backend(), from.Backend())
		return err
	}
	states := 0
	for k := 1; ; k++ {
		f := base.Fork()
		f.StopAfter(k)
		err := copyOn(f)
		if err == nil {
			if k == 1 {
				t.Fatal("a copy that made one call succeeded")
			}
			if got := rel(f.Files(dst), dst); !cmp.Equal(whole, got) {
				t.Fatalf("the finished copy differs from the source:\n%s", cmp.Diff(whole, got))
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
			got := rel(c.Files(dst), dst)
			if len(got) != 0 && !cmp.Equal(whole, got) {
				t.Fatalf("stop %d: a crash leaves a partial destination:\n%s", k, cmp.Diff(whole, got))
			}
			if len(got) == 0 && len(c.Files(dst)) == 0 {
				// Not a root, or an empty one: a new copy starts over.
				if err := copyOn(c); err != nil {
					t.Fatalf("stop %d: copying again after the crash: %v", k, err)
				}
				if got := rel(c.Files(dst), dst); !cmp.Equal(whole, got) {
					t.Fatalf("stop %d: the copy made again differs:\n%s", k, cmp.Diff(whole, got))
				}
			}
		}
	}
	t.Logf("%d crash states checked", states)
}

// relTo is p relative to dir, and whether p is below it.
func relTo(p, dir string) (string, bool) {
	if len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/' {
		return p[len(dir)+1:], true
	}
	return path.Base(p), false
}
