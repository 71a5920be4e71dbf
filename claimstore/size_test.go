package claimstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/hostid"
	"github.com/google/go-cmp/cmp"
)

// A record the read side would refuse as damaged is never published: the
// write-side bound is MaxFileSize, checked before anything is read or
// linked, on both backends. Before the check, acquire linked a 1.2 MB r1
// that every later read (the owner's own steps included) called damaged.
func TestOversizeRecordIsNeverPublished(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		big := map[string]any{}
		for i := range 10 {
			big["m"+string(rune('0'+i))] = strings.Repeat("v", 120_000)
		}
		f := fields(t, s)
		f.Fields = big
		_, err := s.Acquire(context.Background(), seat, session, f)
		if !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("Acquire with a 1.2 MB record: %v, want ErrRecordTooLarge", err)
		}
		for _, want := range []string{"1048576", "nothing was published"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
		for _, k := range []Key{seat, session} {
			if names := dirNames(t, s, k); len(names) != 0 {
				t.Errorf("%v holds %v after a refused acquire", k, names)
			}
		}

		// An advance that would grow the record past the bound is refused
		// the same way, and the claim's own later steps still work.
		c := mustAcquire(t, s, seat, session)
		err = s.Advance(context.Background(), c, Patch{Fields: map[string]any{"huge": strings.Repeat("w", MaxFileSize)}})
		if !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("Advance with a 1 MiB member: %v, want ErrRecordTooLarge", err)
		}
		if c.SeatRev != 1 || c.SessionRev != 1 {
			t.Fatalf("claim at %d/%d after a refused advance, want 1/1", c.SeatRev, c.SessionRev)
		}
		if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatalf("Release after a refused advance: %v", err)
		}
	})
}

// A record just under the bound, at the widest revision number, is
// published and reads back undamaged: the bound refuses only what a reader
// would refuse.
func TestRecordAtTheBoundReadsBack(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	f := fields(t, s)
	probe := f
	probe.Fields = map[string]any{"pad": ""}
	rec, err := s.newRecord(probe)
	if err != nil {
		t.Fatal(err)
	}
	rec.Fields.Set(pairMember, pairJSON(seat, session))
	r := rec.clone()
	r.Key, r.Revision, r.WrittenAt = seat, MaxRevision, timestamp(s.now())
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f.Fields = map[string]any{"pad": strings.Repeat("p", MaxFileSize-len(data))}
	c, err := s.Acquire(context.Background(), seat, session, f)
	if err != nil {
		t.Fatalf("Acquire of a record at the bound: %v", err)
	}
	h, err := openStore(t, s.Root(), nil).Head(context.Background(), seat)
	if err != nil || h.Damage != nil || h.Record == nil || h.Record.ClaimID != c.ID {
		t.Fatalf("head of a record at the bound: %+v, %v", h, err)
	}
	f.Fields["pad"] = strings.Repeat("p", MaxFileSize-len(data)+1)
	f.ClaimID = ""
	if _, err := s.Acquire(context.Background(), seatKey(t, "s2"), sessionKey(t, "x2"), f); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("Acquire one byte over the bound: %v, want ErrRecordTooLarge", err)
	}
}

// A boot proof is verified when a decision rests on it, not remembered: a
// store that read a pair while its proof existed reads the pair exactly as
// a fresh store does once the proof file is gone (both keys held, the one
// naming the proof damaged), and classifies it the same way.
func TestRemovedProofReadsTheSameInALongLivedStore(t *testing.T) {
	root := newRoot(t)
	s0 := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := active4100(t, s0, seat, session, nil)
	// Boot B classifies, and is cut between the keys: the seat stopped on
	// the boot proof, the session still active.
	bootB := hostid.Override{Host: thisHost, Boot: laterBoot}
	cut := openStore(t, root, &TOpts{Host: bootB, Barrier: func(p Point) error {
		if p.Barrier == BarrierBetweenKeys {
			return errCrash
		}
		return nil
	}})
	if _, err := cut.Classify(context.Background(), seat, session, nil); !errors.Is(err, errCrash) {
		t.Fatalf("cut classify: %v", err)
	}
	long := openStore(t, root, &TOpts{Host: bootB})
	p, err := long.Pair(context.Background(), seat, session)
	if err != nil || p.Seat.Held() || !p.Session.Held() {
		t.Fatalf("before the proof is removed: seat held %v, session held %v (%v)", p.Seat.Held(), p.Session.Held(), err)
	}
	ref := p.Seat.Record.Proof.Ref
	if err := os.Remove(filepath.Join(root, ProofDir, ref+".json")); err != nil {
		t.Fatal(err)
	}
	view := func(s *Store) []any {
		p, err := s.Pair(context.Background(), seat, session)
		if err != nil {
			t.Fatal(err)
		}
		return []any{p.Seat.Held(), p.Seat.Damage != nil, p.Session.Held(), p.State()}
	}
	fresh := openStore(t, root, &TOpts{Host: bootB})
	if diff := cmp.Diff(view(fresh), view(long)); diff != "" {
		t.Fatalf("the long-lived store reads the pair unlike a fresh one (-fresh +long):\n%s", diff)
	}
	if got := view(fresh); got[0] != true || got[1] != true {
		t.Fatalf("a seat naming a missing boot proof reads %v, want held and damaged", got)
	}
	// Classified by the long-lived store: held, nothing published, and
	// still read the same by a fresh store.
	res, err := long.Classify(context.Background(), seat, session, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Free() || len(res.Published) != 0 {
		t.Fatalf("classify of a pair whose proof is gone: outcome %s, published %v; want held, nothing published", res.Outcome, res.Published)
	}
	if diff := cmp.Diff(view(openStore(t, root, &TOpts{Host: bootB})), view(long)); diff != "" {
		t.Fatalf("after classify, the long-lived store reads the pair unlike a fresh one (-fresh +long):\n%s", diff)
	}
	_ = c
}

// widestSize is the size of rec encoded as a revision of the largest of
// keys at its widest revision number: what checkSize must compare.
func widestSize(t *testing.T, s *Store, rec *Record, keys ...Key) int {
	t.Helper()
	most := 0
	for _, k := range keys {
		r := rec.clone()
		r.Key, r.Revision, r.WrittenAt = k, MaxRevision, timestamp(s.now())
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if r.sizeBound(k, r.WrittenAt) < len(data) {
			t.Errorf("sizeBound %d is below the encoding's %d bytes", r.sizeBound(k, r.WrittenAt), len(data))
		}
		most = max(most, len(data))
	}
	return most
}

// TestSizeBound: checkSize, which lets a record through on a cheap bound
// when it is far from MaxFileSize, answers exactly as the encoding does
// right at the bound and one byte either side of it, for strings whose
// bytes encode as themselves, as two (multibyte UTF-8; a quote), and as
// six (a control byte, U+2028, a byte of invalid UTF-8), in a member given
// as a field (encoded when given), in a proof's ref (encoded with the
// record) and in a host read back (kept as read), with keys of the longest
// values, all escaped: a bound that counted any of them short would let
// the record one byte over through.
func TestSizeBound(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	long := strings.Repeat("\x01\"", MaxKeyValueLen/2)
	seat, err := SeatKey(long, long, long)
	if err != nil {
		t.Fatal(err)
	}
	session, err := SessionKey(long)
	if err != nil {
		t.Fatal(err)
	}
	recordIn := func(where, pad string) *Record {
		t.Helper()
		f := fields(t, s)
		if where == "field" {
			f.Fields = map[string]any{"pad": pad}
		}
		rec, err := s.newRecord(f)
		if err != nil {
			t.Fatal(err)
		}
		rec.Fields.Set(pairMember, pairJSON(seat, session))
		switch where {
		case "ref":
			rec.State, rec.Proof = Stopped, NewProof(ProofCohort, pad)
		case "host":
			// A host as read back (its raw bytes kept), with a member of
			// another writer's.
			raw, err := jsJSON(map[string]any{"machineId": rec.Host.MachineID, "bootId": rec.Host.BootID, "pad": pad})
			if err != nil {
				t.Fatal(err)
			}
			rec.Host.raw = raw
		}
		return rec
	}
	for _, where := range []string{"field", "ref", "host"} {
		record := func(pad string) *Record { return recordIn(where, pad) }
		for _, unit := range []string{"a", "é", "\"", "\x01", "\u2028", "\xff"} {
			t.Run(fmt.Sprintf("%s/%q", where, unit), func(t *testing.T) {
				// The most units that fit, then ASCII to fill up to the
				// byte: estimated from what one unit adds, then stepped to.
				size := func(m int) int { return widestSize(t, s, record(strings.Repeat(unit, m)), seat, session) }
				// (From one unit: an empty ref is written as null.)
				s1 := size(1)
				lo := 1 + (MaxFileSize-s1)/(size(2)-s1)
				for lo > 1 && size(lo) > MaxFileSize {
					lo--
				}
				for size(lo+1) <= MaxFileSize {
					lo++
				}
				body := strings.Repeat(unit, lo)
				fill := MaxFileSize - size(lo)
				for _, extra := range []int{-1, 0, 1} {
					if fill+extra < 0 {
						continue
					}
					rec := record(body + strings.Repeat("z", fill+extra))
					size := widestSize(t, s, rec, seat, session)
					if want := MaxFileSize + extra; size != want {
						t.Fatalf("the record built to be %d bytes is %d", want, size)
					}
					err := s.checkSize(rec, seat, session)
					if fits := size <= MaxFileSize; fits != (err == nil) || !fits && !errors.Is(err, ErrRecordTooLarge) {
						t.Errorf("checkSize of a %d-byte record (bound %d): %v", size, MaxFileSize, err)
					}
				}
			})
		}
	}
	// Every key is checked, not only the first: a record whose bound lets
	// it through as a revision of a short key is one byte too large as a
	// revision of a long one.
	short := seatKey(t, "s")
	exactOf := func(rec *Record, k Key) int { return widestSize(t, s, rec, k) }
	base := recordIn("field", "")
	rec := recordIn("field", strings.Repeat("a", MaxFileSize+1-exactOf(base, session)))
	if got := exactOf(rec, session); got != MaxFileSize+1 {
		t.Fatalf("the record built to be %d bytes under the long key is %d", MaxFileSize+1, got)
	}
	if b := rec.sizeBound(short, timestamp(s.now())); b > MaxFileSize {
		t.Fatalf("the bound under the short key is %d bytes, over the limit: the case tests nothing", b)
	}
	for _, keys := range [][]Key{{short, session}, {session, short}} {
		if err := s.checkSize(rec, keys...); !errors.Is(err, ErrRecordTooLarge) {
			t.Errorf("checkSize (the short key first: %v) of a record %d bytes under the long key: %v", keys[0] == short, MaxFileSize+1, err)
		}
	}

	// A usual record is let through on the bound alone: far below it.
	f := fields(t, s)
	rec, err = s.newRecord(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := rec.sizeBound(short, timestamp(s.now())); b > MaxFileSize/16 {
		t.Errorf("the bound of a usual record is %d bytes: checkSize would encode it", b)
	}
}
