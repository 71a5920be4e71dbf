package claimstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid/hostidtest"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// TestExplainHeldPairListsNothing: what `claimctl show` reads of a held pair
// (Pair, Refusal, JudgeOwner, Explain) never lists either key's directory,
// whatever row holds the pair: a held answer needs no history, and a
// listing made show's cost grow with it (3.6x at 10,000 revisions, issue
// 21). Every listing of the keys fails here with EIO, so a read that lists
// fails the test.
func TestExplainHeldPairListsNothing(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	w := openOn(t, root, liveHost())
	seat, session := testKeys(t)
	c := active4100(t, w, seat, session, map[string]any{"spawnMarker": true})
	for i := range 30 {
		if err := w.Advance(ctx, c, Patch{Fields: map[string]any{"step": i}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		host *hostidtest.Host
		row  string
	}{
		{"owner live", liveHost(), "6"},
		{"owner gone, same boot", &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}}, "10"},
		{"earlier boot", &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}, "7"},
		{"another machine", &hostidtest.Host{Machine: "ffffffffffffffffffffffffffffffff", Boot: bootB, Procs: map[int]string{}}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var listed []string
			keyDir := func(p string) bool {
				return errorfs.Contains(seat.Hash())(p) || errorfs.Contains(session.Hash())(p)
			}
			efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpReadDir, Path: keyDir,
				OnInject: func(op errorfs.Op, p string) { listed = append(listed, fmt.Sprintf("%s %s", op, p)) }})
			// A fresh store, as each claimctl process opens one: no listing
			// of an earlier call stands in for this one.
			s, err := OpenRoot(root, &TOpts{Host: tc.host, FS: efs})
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.Pair(ctx, seat, session)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Held() || p.Seat.N != 32 {
				t.Fatalf("pair held %v at seat r%d, want held at r32", p.Held(), p.Seat.N)
			}
			_ = s.Refusal(p)
			s.JudgeOwner(p.Seat.Record)
			ex, err := s.Explain(ctx, p)
			if err != nil {
				t.Fatalf("Explain: %v", err)
			}
			if ex.Row != tc.row {
				t.Errorf("row %s, want %s", ex.Row, tc.row)
			}
			if len(listed) > 0 {
				t.Errorf("explaining a held pair listed its keys: %v", listed)
			}
		})
	}
}
