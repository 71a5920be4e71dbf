package dirbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// rootEntriesOf returns the names in dir, sorted (nil for none).
func rootEntriesOf(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// The first write into an existing directory makes a claim root of it
// only when it is empty or holds only lost+found (or is a claim root
// already); one that holds other things is refused, naming them, and
// nothing is written into it.
func TestFirstWriteIntoExistingRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holds   []string
		refused []string // the refusal's entries; nil: written
	}{
		{name: "empty"},
		{name: "lost+found only", holds: []string{"lost+found"}},
		{name: "a claim root", holds: []string{"session"}},
		{name: "other things", holds: []string{"notes.txt", "lost+found", "src"}, refused: []string{"notes.txt", "src"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.holds {
				if err := os.Mkdir(filepath.Join(root, n), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			err := New(root, nil).Publish(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil)
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("first write: %v", err)
				}
				revs, _, err := New(root, nil).List(context.Background(), testLoc)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]uint64{1}, revs); diff != "" {
					t.Errorf("revisions after the first write (-want +got):\n%s", diff)
				}
				return
			}
			var nr *NotClaimRootError
			if !errors.As(err, &nr) || !errors.Is(err, ErrNotClaimRoot) {
				t.Fatalf("first write into a directory holding %v: %v, want a *NotClaimRootError", tc.holds, err)
			}
			if diff := cmp.Diff(&NotClaimRootError{Root: root, Entries: tc.refused}, nr); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			want := append([]string(nil), tc.holds...)
			sort.Strings(want)
			if diff := cmp.Diff(want, rootEntriesOf(t, root)); diff != "" {
				t.Errorf("a refused write changed the directory (-want +got):\n%s", diff)
			}
		})
	}
}

// The first write's own failures are reported as they happened: a root
// that cannot be made (ENOSPC at its mkdir), or an existing one that
// cannot be listed to tell whether it may be written into (EIO), fails the
// write with that error and writes nothing.
func TestFirstWriteRootFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exists bool
		rule   func(root string) *errorfs.Rule
		want   error
	}{
		{
			name: "mkdir fails",
			rule: func(root string) *errorfs.Rule {
				return &errorfs.Rule{Op: errorfs.OpMkdir, Path: func(p string) bool { return p == root }, Err: syscall.ENOSPC}
			},
			want: syscall.ENOSPC,
		},
		{
			name:   "listing an existing root fails",
			exists: true,
			rule: func(root string) *errorfs.Rule {
				return &errorfs.Rule{Op: errorfs.OpReadDir, Path: func(p string) bool { return p == root }, Err: syscall.EIO}
			},
			want: syscall.EIO,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			if tc.exists {
				if err := os.Mkdir(root, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			efs := errorfs.Wrap(vfs.OS, tc.rule(root))
			err := New(root, &Options{FS: efs}).Publish(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("first write: %v, want %v", err, tc.want)
			}
			if len(efs.Injected()) != 1 {
				t.Errorf("faults injected: %v, want the one", efs.Injected())
			}
			if !tc.exists {
				if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the root was made: %v", err)
				}
				return
			}
			if diff := cmp.Diff([]string(nil), rootEntriesOf(t, root)); diff != "" {
				t.Errorf("the failed write left entries in the root (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNotClaimRootNamesWhatItAccepts: the refusal names every entry that
// makes a directory a claim root, and each of them does (archive/ once went
// unnamed: a message that says what a root holds must say all of it).
func TestNotClaimRootNamesWhatItAccepts(t *testing.T) {
	msg := (&NotClaimRootError{Root: "/r", Entries: []string{"junk"}}).Error()
	for _, e := range RootEntries() {
		if err := NotClaimRoot("/r", []string{"junk", e}); err != nil {
			t.Errorf("a directory holding %s/ and junk: %v, want a claim root", e, err)
		}
		if !strings.Contains(msg, e+"/") || !strings.Contains(RootEntriesWords(), e+"/") {
			t.Errorf("the refusal %q (words %q) does not name %s/", msg, RootEntriesWords(), e)
		}
	}
	if got, want := RootEntriesWords(), "seat/, session/, proofs/, status/ or archive/"; got != want {
		t.Errorf("RootEntriesWords() = %q, want %q", got, want)
	}
	if err := NotClaimRoot("/r", []string{"junk"}); err == nil {
		t.Error("a directory holding only junk is taken for a claim root")
	}
}
