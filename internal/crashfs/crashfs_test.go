package crashfs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
)

// outcome summarises a call's result in a form both filesystems share.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, claimstore.ErrUnsafePath):
		return "unsafe"
	case errors.Is(err, fs.ErrNotExist):
		return "notexist"
	case errors.Is(err, fs.ErrExist):
		return "exist"
	}
	return "error"
}

// TestContract runs one sequence of calls on the operating system's
// filesystem and on crashfs and requires the same observable results, so
// that tests on crashfs say something about the store on a real disk.
func TestContract(t *testing.T) {
	osRoot := t.TempDir()
	cfs := crashfs.New(nil)
	if err := cfs.MkdirAll("/base", 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(fsys vfs.FS, root string, symlink func(target, name string) error) []string {
		t.Helper()
		var log []string
		add := func(what string, err error) { log = append(log, what+": "+outcome(err)) }
		p := func(s string) string { return filepath.Join(root, s) }
		add("mkdir d", fsys.Mkdir(p("d"), 0o700))
		add("mkdir d again", fsys.Mkdir(p("d"), 0o700))
		add("mkdir missing/x", fsys.Mkdir(p("missing/x"), 0o700))
		fi, err := fsys.Lstat(p("d"))
		add("lstat d", err)
		if err == nil {
			log = append(log, "d mode "+fi.Mode().String())
		}
		_, err = fsys.Lstat(p("nope"))
		add("lstat nope", err)
		tf, err := fsys.CreateTemp(p("d"), 0o400)
		add("createtemp", err)
		if err != nil {
			return log
		}
		_, err = tf.Write([]byte("hello "))
		add("write", err)
		_, err = tf.Write([]byte("world\n"))
		add("write", err)
		add("sync", tf.Sync())
		add("link r1", tf.Link(p("d/r1")))
		add("link r1 again", tf.Link(p("d/r1")))
		ok, err := tf.Is(p("d/r1"))
		add("is r1", err)
		log = append(log, "is r1 mine: "+map[bool]string{true: "yes", false: "no"}[ok])
		add("close", tf.Close())
		add("syncdir", fsys.SyncDir(p("d")))
		b, rfi, err := fsys.ReadFile(p("d/r1"))
		add("read r1", err)
		log = append(log, "r1 = "+string(b))
		if err == nil {
			log = append(log, fmt.Sprintf("r1 as read: %s, %d bytes, mode %s", rfi.Name(), rfi.Size(), rfi.Mode()))
		}
		fi, err = fsys.Lstat(p("d/r1"))
		add("lstat r1", err)
		if err == nil {
			log = append(log, "r1 mode "+fi.Mode().String())
		}
		add("symlink", symlink(p("d/r1"), p("d/link")))
		_, _, err = fsys.ReadFile(p("d/link"))
		add("read symlink", err)
		fi, err = fsys.Lstat(p("d/link"))
		add("lstat symlink", err)
		if err == nil {
			log = append(log, "link is symlink: "+map[bool]string{true: "yes", false: "no"}[fi.Mode()&fs.ModeSymlink != 0])
		}
		_, _, err = fsys.ReadFile(p("d"))
		log = append(log, "read dir fails: "+map[bool]string{true: "yes", false: "no"}[err != nil])
		names, err := fsys.ReadDir(p("d"))
		add("readdir", err)
		sort.Strings(names)
		log = append(log, names...)
		log = append(log, "remove nonempty fails: "+map[bool]string{true: "yes", false: "no"}[fsys.Remove(p("d")) != nil])
		add("remove link", fsys.Remove(p("d/link")))
		add("remove link again", fsys.Remove(p("d/link")))
		add("mkdir e", fsys.Mkdir(p("e"), 0o700))
		add("rename d onto empty e", fsys.Rename(p("d"), p("e")))
		_, err = fsys.Lstat(p("d"))
		add("lstat d after rename", err)
		b, _, err = fsys.ReadFile(p("e/r1"))
		add("read e/r1", err)
		log = append(log, "e/r1 = "+string(b))
		add("mkdir f", fsys.Mkdir(p("f"), 0o700))
		add("mkdir f/g", fsys.Mkdir(p("f/g"), 0o700))
		log = append(log, "rename onto nonempty fails: "+map[bool]string{true: "yes", false: "no"}[fsys.Rename(p("e"), p("f")) != nil])
		add("rename missing", fsys.Rename(p("nope"), p("x")))
		return log
	}
	want := run(vfs.OS, osRoot, os.Symlink)
	got := run(cfs, "/base", cfs.Symlink)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("crashfs differs from the OS filesystem (-os +crashfs):\n%s", diff)
	}
}

// publish runs the store's publish protocol by hand, with toggles for the
// durability steps.
func publish(t *testing.T, f *crashfs.FS, dir, name, data string, syncFile, syncDir bool) {
	t.Helper()
	tf, err := f.CreateTemp(dir, 0o400)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tf.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if syncFile {
		if err := tf.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tf.Link(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
	if syncDir {
		if err := f.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// states returns, for each crash state, the contents of the files under
// dir ("<missing>" for absent ones among names).
func states(t *testing.T, f *crashfs.FS, m crashfs.Model, dir string) []map[string]string {
	t.Helper()
	cs, _, err := f.CrashStates(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, c := range cs {
		got := map[string]string{}
		for p, b := range c.Files(dir) {
			got[p] = string(b)
		}
		out = append(out, got)
	}
	// fmt prints maps with sorted keys: a stable order to compare in.
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
	return out
}

func TestCrashStates(t *testing.T) {
	for _, tc := range []struct {
		name              string
		syncFile, syncDir bool
		torn              bool
		want              []map[string]string
	}{
		{"durable", true, true, false, []map[string]string{{"/d/r1": "abcd"}}},
		{"name pending", true, false, false, []map[string]string{{"/d/r1": "abcd"}, {}}},
		{"data pending", false, true, false, []map[string]string{{"/d/r1": ""}, {"/d/r1": "abcd"}}},
		{"data pending torn", false, true, true, []map[string]string{{"/d/r1": ""}, {"/d/r1": "ab"}, {"/d/r1": "abcd"}}},
		{"both pending", false, false, false, []map[string]string{{"/d/r1": ""}, {"/d/r1": "abcd"}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := crashfs.New(&crashfs.Options{TornWrites: tc.torn})
			if err := f.MkdirAll("/d", 0o700); err != nil {
				t.Fatal(err)
			}
			publish(t, f, "/d", "r1", "abcd", tc.syncFile, tc.syncDir)
			got := states(t, f, crashfs.ModelSubset, "/d")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("crash states (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnsyncedParentLosesChild: a directory whose entry in its parent is
// not durable takes its durable children with it.
func TestUnsyncedParentLosesChild(t *testing.T) {
	f := crashfs.New(nil)
	if err := f.MkdirAll("/root", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir("/root/k", 0o700); err != nil {
		t.Fatal(err)
	}
	publish(t, f, "/root/k", "r1", "x", true, true)
	got := states(t, f, crashfs.ModelSubset, "/root")
	want := []map[string]string{{"/root/k/r1": "x"}, {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("crash states (-want +got):\n%s", diff)
	}
	if err := f.SyncDir("/root"); err != nil {
		t.Fatal(err)
	}
	got = states(t, f, crashfs.ModelSubset, "/root")
	if diff := cmp.Diff(want[:1], got); diff != "" {
		t.Errorf("after syncing the parent (-want +got):\n%s", diff)
	}
}

// TestSubsetOutOfOrder: under ModelSubset a later entry change of one
// directory may survive an earlier one; under ModelPrefix it may not.
func TestSubsetOutOfOrder(t *testing.T) {
	f := crashfs.New(&crashfs.Options{NamedTemps: true})
	if err := f.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	publish(t, f, "/d", "r1", "a", true, false)
	publish(t, f, "/d", "r2", "b", true, false)
	sub := states(t, f, crashfs.ModelSubset, "/d")
	pre := states(t, f, crashfs.ModelPrefix, "/d")
	has := func(ss []map[string]string, want map[string]string) bool {
		for _, s := range ss {
			if cmp.Equal(s, want) {
				return true
			}
		}
		return false
	}
	onlyR2 := map[string]string{"/d/r2": "b"}
	if !has(sub, onlyR2) {
		t.Errorf("subset model lacks the state with r2 but not r1: %v", sub)
	}
	if has(pre, onlyR2) {
		t.Errorf("prefix model has the state with r2 but not r1: %v", pre)
	}
	for _, s := range pre {
		if !has(sub, s) {
			t.Errorf("prefix state %v is not a subset state", s)
		}
	}
	// Named temporaries can be left behind.
	leftover := false
	for _, s := range sub {
		for p := range s {
			if strings.HasPrefix(filepath.Base(p), vfs.TempPrefix) {
				leftover = true
			}
		}
	}
	if !leftover {
		t.Errorf("no crash state keeps a named temporary: %v", sub)
	}
}

func TestStopAfter(t *testing.T) {
	f := crashfs.New(nil)
	if err := f.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	f.StopAfter(2)
	if err := f.Mkdir("/d/a", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lstat("/d/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir("/d/b", 0o700); !errors.Is(err, crashfs.ErrStopped) {
		t.Fatalf("third call: %v, want ErrStopped", err)
	}
	if _, err := f.Lstat("/d/a"); !errors.Is(err, crashfs.ErrStopped) {
		t.Fatalf("call after the stop: %v, want ErrStopped", err)
	}
	if got, want := f.Calls(), 3; got != want {
		t.Errorf("Calls() = %d, want %d", got, want)
	}
	if _, ok := f.Tree()["/d/b/"]; ok {
		t.Errorf("the stopped call changed the tree")
	}
}

func TestDropPending(t *testing.T) {
	f := crashfs.New(nil)
	if err := f.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	publish(t, f, "/d", "r1", "abc", false, true)
	if n := f.DropPending("/d/r1"); n != 1 {
		t.Fatalf("DropPending dropped %d writes, want 1", n)
	}
	b, _, err := f.ReadFile("/d/r1")
	if err != nil || len(b) != 0 {
		t.Fatalf("after DropPending r1 = %q, %v; want empty", b, err)
	}
}

// A rename within one directory is one entry change: a crash keeps the old
// name or the new one, never both and never neither; after the directory's
// fsync, only the new one.
func TestRenameIsAtomicInOneDirectory(t *testing.T) {
	f := crashfs.New(nil)
	if err := f.MkdirAll("/p/stage", 0o700); err != nil {
		t.Fatal(err)
	}
	publish(t, f, "/p/stage", "r1", "x", true, true)
	if err := f.SyncDir("/p"); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename("/p/stage", "/p/root"); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{{"/p/root/r1": "x"}, {"/p/stage/r1": "x"}}
	if diff := cmp.Diff(want, states(t, f, crashfs.ModelSubset, "/p")); diff != "" {
		t.Errorf("crash states of a pending rename (-want +got):\n%s", diff)
	}
	if err := f.SyncDir("/p"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:1], states(t, f, crashfs.ModelSubset, "/p")); diff != "" {
		t.Errorf("crash states after the fsync (-want +got):\n%s", diff)
	}
}
