package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unitFile reads a systemd unit file into section -> "Key=Value" lines, in
// order, without comments.
func unitFile(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	sec := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			sec = strings.Trim(line, "[]")
		default:
			if !strings.Contains(line, "=") {
				t.Errorf("%s: %q is not Key=Value", path, line)
			}
			out[sec] = append(out[sec], line)
		}
	}
	return out
}

// The shipped boot units (the system one is not started by the tests; the
// user one is, by testdata/systemd/boot.txtar) run the same service: a
// oneshot that stays active, classify --all, held pairs a success.
func TestShippedBootUnits(t *testing.T) {
	sys := unitFile(t, filepath.Join("..", "..", "dist", "systemd", "system", "claimstore-classify.service"))
	user := unitFile(t, filepath.Join("..", "..", "dist", "systemd", "user", "claimstore-classify.service"))
	if diff := cmp.Diff(sys["Service"], user["Service"]); diff != "" {
		t.Errorf("[Service] system (-) vs user (+):\n%s", diff)
	}
	// TimeoutStartSec: a oneshot has none by default, and supervisors ordered
	// After= the unit would wait for a hung classify forever.
	for _, want := range []string{"Type=oneshot", "RemainAfterExit=yes", "ExecStart=claimctl classify --all", "SuccessExitStatus=3 5 6", "TimeoutStartSec=15min"} {
		found := false
		for _, l := range sys["Service"] {
			found = found || l == want
		}
		if !found {
			t.Errorf("[Service] has no %q: %q", want, sys["Service"])
		}
	}
	// The codes it counts as success are claimctl's for "left held".
	for _, code := range []exitCode{exitAlreadyActive, exitForeignHost, exitUncertain} {
		if !strings.Contains(" 3 5 6 ", " "+string(rune('0'+code))+" ") {
			t.Errorf("exit code %d is not among SuccessExitStatus", code)
		}
	}
	if diff := cmp.Diff([]string{"WantedBy=multi-user.target"}, sys["Install"]); diff != "" {
		t.Errorf("system [Install] (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"WantedBy=default.target"}, user["Install"]); diff != "" {
		t.Errorf("user [Install] (-want +got):\n%s", diff)
	}
}
