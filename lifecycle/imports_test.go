package lifecycle_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Neither claimstore nor lifecycle links D-Bus or systemd: starters come in
// through lifecycle.Starter, unit lookups through claimstore.UnitLookup.
func TestNoDBusBelowStarters(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/claimstore/claimstore/claimstore", "github.com/claimstore/claimstore/lifecycle").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "godbus") || strings.Contains(dep, "go-systemd") || strings.HasSuffix(dep, "/unitprobe") || strings.HasSuffix(dep, "/unitctl") {
			t.Errorf("claimstore or lifecycle depends on %s", dep)
		}
	}
}
