package claimstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A step is refused as too large when the record would not fit at the
// widest revision number, even though it would fit at the number the step
// is about to publish: the answer does not depend on the number (a record
// that fits at revision 2 but not at a ten-digit one would otherwise be
// accepted now and refused, on one key or both, later in the claim's life).
// Nothing is published, and the claim can still step.
func TestAdvanceRefusesARecordTooLargeAtTheWidestRevision(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)

		// The size of the stepped record, padded by nothing, at the widest
		// number on the larger of the two keys, and at revision 2.
		next := c.Record.clone()
		if err := applyFields(&next.Fields, map[string]any{"pad": ""}); err != nil {
			t.Fatal(err)
		}
		size := func(n uint64) int {
			t.Helper()
			most := 0
			for _, k := range []Key{seat, session} {
				r := next.clone()
				r.Key, r.Revision, r.WrittenAt = k, n, timestamp(s.now())
				data, err := r.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				most = max(most, len(data))
			}
			return most
		}
		pad := MaxFileSize - size(MaxRevision) + 1 // one byte over at the widest number
		if size(2)+pad > MaxFileSize {
			t.Fatalf("the padded record does not fit at revision 2 either (%d bytes): the test proves nothing", size(2)+pad)
		}

		before := map[Key][]string{seat: dirNames(t, s, seat), session: dirNames(t, s, session)}
		err := s.Advance(ctx, c, Patch{Fields: map[string]any{"pad": strings.Repeat("p", pad)}})
		if !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("Advance of a record one byte too large at revision %d: %v, want ErrRecordTooLarge", uint64(MaxRevision), err)
		}
		after := map[Key][]string{seat: dirNames(t, s, seat), session: dirNames(t, s, session)}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("revisions after the refused step (-before +after):\n%s", diff)
		}
		if c.SeatRev != 1 || c.SessionRev != 1 {
			t.Errorf("the claim is at %d/%d after the refused step, want 1/1", c.SeatRev, c.SessionRev)
		}

		// One byte less fits at every number, and is published.
		if err := s.Advance(ctx, c, Patch{Fields: map[string]any{"pad": strings.Repeat("p", pad-1)}}); err != nil {
			t.Fatalf("Advance of a record at the bound: %v", err)
		}
		if c.SeatRev != 2 || c.SessionRev != 2 {
			t.Errorf("the claim is at %d/%d after the step, want 2/2", c.SeatRev, c.SessionRev)
		}
	})
}
