package hostid

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// countReads replaces readIDFile with one that counts the reads of each
// file (and fails the first fail of them), and forgets the memoized boot
// id, for the test's duration.
func countReads(t *testing.T, fail int) map[string]*atomic.Int32 {
	t.Helper()
	counts := map[string]*atomic.Int32{BootIDFile: {}}
	var mu sync.Mutex
	orig := readIDFile
	failed := 0
	readIDFile = func(name string) ([]byte, error) {
		mu.Lock()
		c := counts[name]
		if c == nil {
			c = &atomic.Int32{}
			counts[name] = c
		}
		refuse := failed < fail
		failed++
		mu.Unlock()
		c.Add(1)
		if refuse {
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
		}
		return orig(name)
	}
	resetBootMemo := func() {
		bootMemo.Lock()
		bootMemo.id = ""
		bootMemo.Unlock()
	}
	resetBootMemo()
	t.Cleanup(func() { readIDFile = orig; resetBootMemo() })
	return counts
}

// TestBootIDReadOncePerProcess: the kernel's boot id is read once however
// many judgements, proofs and identities ask for it, from however many
// goroutines (classify --all's workers); every call answers the same id.
func TestBootIDReadOncePerProcess(t *testing.T) {
	counts := countReads(t, 0)
	var wg sync.WaitGroup
	ids := make([]string, 64)
	for i := range ids {
		wg.Go(func() {
			id, err := System.BootID()
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	// A judgement reads it too.
	if st, why := Judge(System, Owner{PID: 1, Start: "1", Boot: "00000000-0000-4000-8000-000000000000"}); st != Gone {
		t.Errorf("Judge of an owner of another boot = %s (%s), want gone", st, why)
	}
	if n := counts[BootIDFile].Load(); n != 1 {
		t.Errorf("%s read %d times, want once", BootIDFile, n)
	}
	for _, id := range ids {
		if id != ids[0] || !isBootID(id) {
			t.Fatalf("boot ids %q differ or are malformed", ids)
		}
	}
}

// TestBootIDFailureNotRemembered: a failed read of the kernel's boot id
// (out of descriptors) is an error for that call only: the next call reads
// again, and the id it reads is then kept.
func TestBootIDFailureNotRemembered(t *testing.T) {
	counts := countReads(t, 1)
	if _, err := System.BootID(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("first BootID: %v, want the read's EMFILE", err)
	}
	for range 3 {
		if _, err := System.BootID(); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts[BootIDFile].Load(); n != 2 {
		t.Errorf("%s read %d times, want twice (the failure, then once)", BootIDFile, n)
	}
}

// TestBootIDOtherFileReadEveryCall: a boot id file other than the kernel's
// (FromFiles: tests, hosts that keep it elsewhere) may change under a
// running process, so it is read at every call and never memoized.
func TestBootIDOtherFileReadEveryCall(t *testing.T) {
	counts := countReads(t, 0)
	dir := t.TempDir()
	p := writeFile(t, dir, "boot", goodBoot+"\n")
	h := FromFiles(nil, p)
	for range 3 {
		if id, err := h.BootID(); err != nil || id != goodBoot {
			t.Fatalf("BootID = %q, %v", id, err)
		}
	}
	other := "00000000-0000-4000-8000-000000000000"
	writeFile(t, dir, "boot", other+"\n")
	if id, err := h.BootID(); err != nil || id != other {
		t.Fatalf("BootID after the file changed = %q, %v; want %s", id, err, other)
	}
	if n := counts[filepath.Join(dir, "boot")].Load(); n != 4 {
		t.Errorf("%s read %d times, want 4", p, n)
	}
	if n := counts[BootIDFile].Load(); n != 0 {
		t.Errorf("%s read %d times, want none", BootIDFile, n)
	}
}
