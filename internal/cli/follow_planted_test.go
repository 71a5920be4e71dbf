package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
)

// log --follow where a plain file stands for session/ or the session's
// key directory: the watch fails with ENOTDIR while the path exists, and
// the arm loop used to retry it forever (issue 20: 27 % CPU, SIGTERM
// ignored). It is an error naming the path, exit 1, at once.
// TestNothingBlocksOnPlantedFiles covers wait; log --follow runs until a
// signal when nothing is wrong, so it cannot join that table.
func TestFollowRefusesANonDirectory(t *testing.T) {
	session, _ := claimstore.SessionKey("x")
	for name, at := range map[string]func(root string) string{
		"session/":      func(r string) string { return filepath.Join(r, "session") },
		"key directory": func(r string) string { return filepath.Join(r, "session", session.Hash()) },
	} {
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			s, err := storetest.Open(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			seat, _ := claimstore.SeatKey("s", "p", "/w")
			owner, _ := s.Self(nil)
			c, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: owner})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
			p := at(root)
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("planted\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runBounded(t, nil, "log", "--root", root, "--session", "x", "--follow")
			if code != exitError || !strings.Contains(stderr, p) || !strings.Contains(stderr, "not a directory") {
				t.Errorf("log --follow with a file as %s: exit %d, stderr:\n%s\nwant exit 1 naming %s, not a directory", name, code, stderr, p)
			}
		})
	}
}
