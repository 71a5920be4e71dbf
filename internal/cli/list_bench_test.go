package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
)

// BenchmarkList10000Pairs lists a root of 10,000 held pairs (20,000 keys,
// one revision each, written directly rather than through 10,000 acquires'
// fsyncs): list reads heads, never histories, and judges each distinct
// owner once.
//
//	go test -run '^$' -bench List10000 -benchtime 5x ./internal/cli/
func BenchmarkList10000Pairs(b *testing.B) {
	root := filepath.Join(b.TempDir(), "root")
	writeHeldPairs(b, root, 10000)
	args := []string{"list", "--root", root}
	b.ResetTimer()
	for range b.N {
		if code := run(testOptions, args, nil, io.Discard, io.Discard, func(string) string { return "" }, false); code != exitOK {
			b.Fatalf("list: exit %d", code)
		}
	}
}

// writeHeldPairs writes n pairs held by reserved claims of this process.
func writeHeldPairs(tb testing.TB, root string, n int) {
	host := hostid.System
	owner, err := hostid.Self(host)
	if err != nil {
		tb.Fatal(err)
	}
	machine, _ := host.MachineID()
	boot, _ := host.BootID()
	ownerJSON, _ := json.Marshal(map[string]any{"pid": owner.PID, "start": owner.Start, "boot": owner.Boot, "pidns": owner.PIDNS})
	for _, d := range []string{root, filepath.Join(root, "seat"), filepath.Join(root, "session")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		seat, _ := claimstore.SeatKey(fmt.Sprintf("s%d", i), "p", "/w")
		session, _ := claimstore.SessionKey(fmt.Sprintf("x%d", i))
		id := fmt.Sprintf("c%024x", i+1)
		for _, k := range []claimstore.Key{seat, session} {
			rec := &claimstore.Record{ClaimID: id, State: claimstore.Reserved, Host: claimstore.Host{MachineID: machine, BootID: boot},
				Key: k, Revision: 1, WrittenAt: "2026-01-01T00:00:00.000Z"}
			rec.Fields.Set("owner", ownerJSON)
			rec.Fields.Set("unitName", json.RawMessage(`"mosaic-chat-`+id+`"`))
			data, err := rec.Marshal()
			if err != nil {
				tb.Fatal(err)
			}
			dir := filepath.Join(root, string(k.Kind), k.Hash())
			if err := os.Mkdir(dir, 0o700); err != nil {
				tb.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, claimstore.RevisionName(1)), data, 0o400); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// The listing of a generated root counts every pair.
func TestListManyPairs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	writeHeldPairs(t, root, 200)
	code, out, stderr := runIn(t, nil, "list", "--root", root)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "200 held pairs, 0 orphan keys listed (400 keys under " + root + ")"; !strings.Contains(out, want) {
		t.Errorf("list: want %q in\n%.400s", want, out)
	}
}
