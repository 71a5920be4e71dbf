package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/hostid"
)

// TestDecommissionConfirm: on a terminal decommission shows what it will
// record and writes it only when the machine id is typed in full; anything
// else (y, another id, nothing) cancels with exit 1 and writes nothing.
// The terminal is faked (stdinIsTerminal); the scripts cover the rest.
func TestDecommissionConfirm(t *testing.T) {
	const dead = "0123456789abcdef0123456789abcdef"
	root := filepath.Join(t.TempDir(), "root")
	be, err := dirbackend.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := claimstore.New(be, &claimstore.Options{Host: hostid.Override{Host: hostid.System, Machine: dead, Boot: "aaaaaaaa-0000-4000-8000-000000000001"}})
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := claimstore.SeatKey("s", "p", "/w")
	session, _ := claimstore.SessionKey("x")
	self, err := s.Self(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: self}); err != nil {
		t.Fatal(err)
	}
	old := stdinIsTerminal
	stdinIsTerminal = func(*env) bool { return true }
	defer func() { stdinIsTerminal = old }()
	oldHooks := testHooks
	testHooks = true
	defer func() { testHooks = oldHooks }()
	getenv := func(string) string { return "" }
	args := []string{"decommission", "--root", root, "--machine", dead, "--evidence", "wiped", "--reason", "disks shredded, OPS-3"}
	for _, typed := range []string{"y\n", "", "fedcba9876543210fedcba9876543210\n"} {
		var out, errb bytes.Buffer
		if code := run(testOptions, args, strings.NewReader(typed), &out, &errb, getenv, false); code != exitError {
			t.Errorf("typed %q: exit %d; want %d (cancelled)\n%s", typed, code, exitError, errb.String())
		}
		if !strings.Contains(errb.String(), "Type the machine id to confirm") || !strings.Contains(errb.String(), "not confirmed") {
			t.Errorf("typed %q: stderr %q", typed, errb.String())
		}
		if d, err := s.Decommissioned(context.Background(), dead); err != nil || d != nil {
			t.Fatalf("typed %q: a record was written: %+v, %v", typed, d, err)
		}
	}
	var out, errb bytes.Buffer
	if code := run(testOptions, args, strings.NewReader(dead+"\n"), &out, &errb, getenv, false); code != exitOK {
		t.Fatalf("typed the id: exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{"Decommission machine " + dead, "boots seen:   aaaaaaaa-0000-4000-8000-000000000001", "held claims:  1", "will never again run any writer"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the prompt does not say %q:\n%s", want, errb.String())
		}
	}
	if !strings.Contains(out.String(), "decommissioned machine "+dead+": record "+claimstore.DecommissionID(dead, 1)) {
		t.Errorf("stdout %q", out.String())
	}
	if d, err := s.Decommissioned(context.Background(), dead); err != nil || d == nil || d.Evidence != claimstore.EvidenceWiped {
		t.Errorf("record after confirming: %+v, %v", d, err)
	}
}
