package claimstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/hostid"
)

// buildHistory writes a key with revs revisions straight to disk (setup
// only: the files are what the store would publish, without its fsyncs)
// and checks that Head finds the last one.
func buildHistory(b *testing.B, revs uint64) (root string, k Key) {
	b.Helper()
	root = newRoot(b)
	s := openStore(b, root, nil)
	k = sessionKey(b, "bench")
	for n := uint64(1); n <= revs; n++ {
		writeRev(b, s, k, n, refRecord(k, n, testClaimID, "active").bytes())
	}
	h, err := openStore(b, root, nil).Head(k)
	if err != nil || h.N != revs || h.Damage != nil {
		b.Fatalf("Head over the built history = %+v, %v; want revision %d", h, err, revs)
	}
	return root, k
}

// BenchmarkHead measures Head on a key with 1, 100 and 10,000 revisions.
// cold opens a fresh Store per lookup, so the backend has no hint and
// gallops from revision 1 (cost grows with log(history)); warm reuses one
// store, whose hint makes the probe two Lstats. open is the cost of Open
// alone, to subtract from cold.
func BenchmarkHead(b *testing.B) {
	for _, revs := range []uint64{1, 100, 10_000} {
		b.Run(fmt.Sprint("revs=", revs), func(b *testing.B) {
			root, k := buildHistory(b, revs)
			b.Run("cold", func(b *testing.B) {
				for b.Loop() {
					s, err := Open(root, &Options{Host: thisHost})
					if err != nil {
						b.Fatal(err)
					}
					if h, err := s.Head(k); err != nil || h.N != revs {
						b.Fatalf("Head = %+v, %v", h, err)
					}
				}
			})
			b.Run("warm", func(b *testing.B) {
				s := openStore(b, root, nil)
				for b.Loop() {
					if h, err := s.Head(k); err != nil || h.N != revs {
						b.Fatalf("Head = %+v, %v", h, err)
					}
				}
			})
		})
	}
	b.Run("open", func(b *testing.B) {
		root, _ := buildHistory(b, 1)
		for b.Loop() {
			if _, err := Open(root, &Options{Host: thisHost}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLifecycle: acquire → active → release on a fresh pair per
// iteration, in one store: 6 revisions (each a file fsync and a directory
// fsync) plus 2 new key directories (each an fsync of its kind directory).
func BenchmarkLifecycle(b *testing.B) {
	s := openStore(b, newRoot(b), nil)
	f := fields(b, s)
	i := 0
	for b.Loop() {
		i++
		seat, session := seatKey(b, fmt.Sprint("s", i)), sessionKey(b, fmt.Sprint("x", i))
		c, err := s.Acquire(seat, session, f)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Advance(c, Patch{State: Active}); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(c, NewProof(ProofNoUnit, "")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawFsyncs is the floor under BenchmarkLifecycle on the same
// filesystem: per iteration, 2 new directories with their parents fsynced,
// then 6 × (create, write a record-sized file, fsync it, fsync its
// directory).
func BenchmarkRawFsyncs(b *testing.B) {
	base := b.TempDir()
	parents := []string{filepath.Join(base, "seat"), filepath.Join(base, "session")}
	for _, p := range parents {
		if err := os.Mkdir(p, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	data := refRecord(sessionKey(b, "bench"), 1, testClaimID, "active").bytes()
	syncDir := func(dir string) {
		if err := OSFS.SyncDir(dir); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		i++
		var dirs []string
		for _, p := range parents {
			dir := filepath.Join(p, fmt.Sprint(i))
			if err := os.Mkdir(dir, 0o700); err != nil {
				b.Fatal(err)
			}
			syncDir(p)
			dirs = append(dirs, dir)
		}
		for n := 1; n <= 3; n++ {
			for _, dir := range dirs {
				f, err := os.OpenFile(filepath.Join(dir, RevisionName(uint64(n))), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
				syncDir(dir)
			}
		}
	}
}

// BenchmarkHeadFree measures a cold Head on a key whose head is stopped
// with a proof: a head that reads free is confirmed by one listing of the
// directory (see Store.head), so unlike a held head its cost grows
// with the history.
//
// proof=boot is the same on a head stopped on one of the store's boot
// proofs, which a free head must verify (one more file read, cold): compare
// it with proof=no-unit at the same history.
func BenchmarkHeadFree(b *testing.B) {
	for _, bench := range []struct {
		revs  uint64
		proof string
	}{{1, "no-unit"}, {1, "boot"}, {10_000, "no-unit"}, {10_000, "boot"}} {
		revs := bench.revs
		b.Run(fmt.Sprintf("revs=%d/proof=%s", revs, bench.proof), func(b *testing.B) {
			root := newRoot(b)
			s := openStore(b, root, nil)
			k := sessionKey(b, "bench")
			proof := `{"kind":"no-unit","ref":null}`
			if bench.proof == "boot" {
				later := openStore(b, root, &Options{Host: hostid.Override{Host: thisHost, Boot: "99999999-2222-3333-4444-555555555555"}})
				bp, err := later.IssueBootProof(&Record{ClaimID: testClaimID, Host: Host{MachineID: testMachine, BootID: testBoot}})
				if err != nil {
					b.Fatal(err)
				}
				proof = `{"kind":"boot","ref":"` + bp.ID + `","effects":null}`
			}
			for n := uint64(1); n <= revs; n++ {
				data := refRecord(k, n, testClaimID, "active").bytes()
				if n == revs {
					data = bytes.Replace(refRecord(k, n, testClaimID, "stopped").bytes(), []byte(`"proof":null`), []byte(`"proof":`+proof), 1)
				}
				writeRev(b, s, k, n, data)
			}
			b.Run("cold", func(b *testing.B) {
				for b.Loop() {
					s, err := Open(root, &Options{Host: thisHost})
					if err != nil {
						b.Fatal(err)
					}
					if h, err := s.Head(k); err != nil || h.N != revs || h.Held() {
						b.Fatalf("Head = %+v, %v", h, err)
					}
				}
			})
			// warm: one store, which listed the key once and since trusts
			// that the protocol only appends.
			b.Run("warm", func(b *testing.B) {
				s := openStore(b, root, nil)
				for b.Loop() {
					if h, err := s.Head(k); err != nil || h.N != revs || h.Held() {
						b.Fatalf("Head = %+v, %v", h, err)
					}
				}
			})
		})
	}
}
