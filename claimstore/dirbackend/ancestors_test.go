package dirbackend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// The ancestor rule as a user other than root applies it: directories of
// root or of this user are fine, another user's are not, whatever the
// mode. Run as that user by changing only what the check believes its
// effective uid is (the tests run as root).
func TestAncestorsJudgedAsThisUser(t *testing.T) {
	const me, other = 4242, 4343
	old := geteuid
	geteuid = func() int { return me }
	t.Cleanup(func() { geteuid = old })
	base := t.TempDir() // under directories of root
	mine := filepath.Join(base, "mine")
	theirs := filepath.Join(base, "theirs")
	for dir, uid := range map[string]int{mine: me, theirs: other} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkAncestors(filepath.Join(mine, "claims")); err != nil {
		t.Errorf("a root in this user's directory under root's: %v", err)
	}
	err := checkAncestors(filepath.Join(theirs, "claims"))
	if !errors.Is(err, storage.ErrUnsafeRoot) || !strings.Contains(err.Error(), "belongs to uid 4343") {
		t.Errorf("a root in another user's directory: %v, want storage.ErrUnsafeRoot naming uid 4343", err)
	}
}

// An ancestor that does not exist, that is not a directory, or that is a
// symlink to nowhere cannot be checked: the root is refused, naming it.
func TestAncestorsThatCannotBeChecked(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(base, "dangling")
	if err := os.Symlink(filepath.Join(base, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ root, want string }{
		{filepath.Join(base, "missing", "claims"), "cannot be checked"},
		{filepath.Join(file, "claims"), "is not a directory"},
		{filepath.Join(dangling, "claims"), "symlink that cannot be resolved"},
	} {
		err := checkAncestors(tc.root)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkAncestors(%s) = %v, want an error saying %q", tc.root, err, tc.want)
		}
	}
}
