package etcdtest

import (
	"flag"
	"strings"
	"testing"
)

// Under -short the etcd tests are left out, with a reason; with CI set, or
// ShortEnv=run, they run; without -short they always run.
func TestLeftOut(t *testing.T) {
	f := flag.Lookup("test.short")
	was := f.Value.String()
	t.Cleanup(func() { f.Value.Set(was) })
	for _, tc := range []struct {
		short, ci, env string
		leftOut        bool
	}{
		{"false", "", "", false},
		{"false", "true", "", false},
		{"true", "", "", true},
		{"true", "", "no", true},
		{"true", "true", "", false},
		{"true", "1", "", false},
		{"true", "", "run", false},
	} {
		f.Value.Set(tc.short)
		t.Setenv("CI", tc.ci)
		t.Setenv(ShortEnv, tc.env)
		why := LeftOut()
		if (why != "") != tc.leftOut || tc.leftOut && !strings.Contains(why, "-short") {
			t.Errorf("short=%s CI=%q %s=%q: LeftOut() = %q, want left out: %v", tc.short, tc.ci, ShortEnv, tc.env, why, tc.leftOut)
		}
	}
}
