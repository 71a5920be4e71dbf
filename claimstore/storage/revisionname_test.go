package storage

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// RevisionName is fmt's "r%010d.json" for every number, written digit by
// digit up to MaxRevision and by fmt beyond it, and ParseRevisionName reads
// back every number it names (1..MaxRevision: there is no revision 0).
func TestRevisionName(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, n uint64) {
		got, want := RevisionName(n), fmt.Sprintf("r%010d.json", n)
		if got != want {
			t.Fatalf("RevisionName(%d) = %q, want %q", n, got, want)
		}
		if back, ok := ParseRevisionName(got); n >= 1 && n <= MaxRevision && (!ok || back != n) {
			t.Fatalf("ParseRevisionName(%q) = %d, %v; want %d", got, back, ok, n)
		}
	}
	for _, n := range []uint64{0, 1, 9, 10, 999_999_999, 1_000_000_000, MaxRevision, MaxRevision + 1, 1<<64 - 1} {
		check(t, n)
	}
	rapid.Check(t, func(t *rapid.T) { check(t, rapid.Uint64Range(0, 2*MaxRevision).Draw(t, "n")) })
}
