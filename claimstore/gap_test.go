package claimstore

import "testing"

// A gap's missing revisions are named, as ranges, whole; runs beyond the
// fifth are counted.
func TestGapMissing(t *testing.T) {
	for _, tc := range []struct {
		gaps []Gap
		want string
	}{
		{[]Gap{{From: 2, To: 2}}, "revision 2 is missing"},
		{[]Gap{{From: 2, To: 4}, {From: 7, To: 7}}, "revisions 2-4 and 7 are missing"},
		{[]Gap{{From: 5, To: 9999999998}}, "revisions 5-9999999998 are missing"},
		{[]Gap{{From: 1, To: 1}, {From: 3, To: 3}, {From: 5, To: 5}, {From: 7, To: 7}, {From: 9, To: 9}, {From: 11, To: 11}, {From: 13, To: 14}}, "revisions 1, 3, 5, 7, 9 and 2 more runs (8 revisions in all) are missing"},
	} {
		if got := (&GapError{Gaps: tc.gaps}).Missing(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.gaps, got, tc.want)
		}
	}
}
