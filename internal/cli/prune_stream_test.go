package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// prune --json writes its document as prune acts; the bytes are those
// writeJSON writes of the whole document, with no action, with several
// (text that JSON may escape included), and ended early with an error.
func TestPruneStreamIsTheDocument(t *testing.T) {
	acts := []pruneActionJSON{
		{Action: "removed", Kind: "session", Key: keyJSON{Kind: "session", Session: "a<b>&c"}, Dir: "/r/session/x", From: 1, To: 5},
		{Action: "kept", Kind: "seat", Key: keyJSON{Kind: "seat", Seat: "s\u00e9at \"q\""}, Dir: "/r/seat/y", Reason: `"actions":[] in a reason`},
		{Action: "compacted", Kind: "seat", Key: keyJSON{Kind: "seat", Seat: "z"}, Dir: "/r/seat/z", From: 1, To: 9},
	}
	for _, tc := range []struct {
		name string
		n    int
		err  string
	}{{"none", 0, ""}, {"one", 1, ""}, {"all", 3, ""}, {"stopped", 2, "pruning /r: fsync failed"}} {
		t.Run(tc.name, func(t *testing.T) {
			j := pruneJSON{Root: `/r/"actions":[]`, DryRun: true, OlderThan: "30d", Actions: []pruneActionJSON{}}
			var out bytes.Buffer
			p := &pruneStream{w: bufio.NewWriter(&out)}
			for _, a := range acts[:tc.n] {
				p.action(&j, a)
			}
			j.Keys, j.Removed, j.Archives, j.Error = 12, 1, []string{"seg"}, tc.err
			p.end(&j)
			want := j
			want.Actions = append([]pruneActionJSON{}, acts[:tc.n]...)
			var b bytes.Buffer
			writeJSON(&b, want)
			if d := cmp.Diff(b.String(), out.String()); d != "" {
				t.Fatalf("streamed document (-whole +streamed):\n%s", d)
			}
			var back pruneJSON
			if err := json.Unmarshal(out.Bytes(), &back); err != nil || len(back.Actions) != tc.n || back.Error != tc.err {
				t.Fatalf("the document reads back as %d actions, error %q (%v)", len(back.Actions), back.Error, err)
			}
		})
	}
}

// prune runs with less collector headroom than the runtime's default,
// unless the operator set GOGC.
func TestPruneGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	root := filepath.Join(t.TempDir(), "root")
	if code, out, errs := runIn(t, nil, "acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--owner-pid", "parent"); code != exitOK {
		t.Fatalf("acquire: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runIn(t, nil, "prune", "--root", root, "--dry-run"); code != exitOK {
		t.Fatalf("prune: exit %d\n%s%s", code, out, errs)
	}
	if got := debug.SetGCPercent(100); got != pruneGCPercent {
		t.Errorf("after claimctl prune the collector's target is %d, want %d", got, pruneGCPercent)
	}
	pruneGC(func(k string) string {
		if k == "GOGC" {
			return "200"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, pruneGC changed the collector's target to %d", got)
	}
}
