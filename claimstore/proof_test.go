package claimstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/claimstore/claimstore/hostid"
)

const laterBoot = "99999999-2222-3333-4444-555555555555"

// IssueBootProof issues a proof only on its evidence: a record of this
// machine, under a well-formed boot that is not the current one.
func TestIssueBootProofRefusals(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), &TOpts{Host: hostid.Override{Host: thisHost, Boot: laterBoot}})
		id := "c" + strings.Repeat("a", 24)
		for _, tc := range []struct {
			name string
			host Host
			code Code
		}{
			{"another machine", Host{MachineID: otherMachine, BootID: testBoot}, ForeignHost},
			{"the current boot", Host{MachineID: testMachine, BootID: laterBoot}, UnsafeReplacement},
			{"a malformed boot", Host{MachineID: testMachine, BootID: "not-a-boot"}, UnsafeReplacement},
			{"an uppercase boot", Host{MachineID: testMachine, BootID: "AAAAAAAA-2222-3333-4444-555555555555"}, UnsafeReplacement},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, err := s.IssueBootProof(context.Background(), &Record{ClaimID: id, Host: tc.host})
				if !isRefusal(err, tc.code) || p != nil {
					t.Fatalf("IssueBootProof = %+v, %v; want refused %s", p, err, tc.code)
				}
			})
		}
		if ids, _ := s.Backend().Proofs(context.Background()); len(ids) != 0 {
			t.Errorf("refusals wrote proofs: %v", ids)
		}
		// The evidence holds: a proof, durable, that verifies for the record.
		rec := &Record{ClaimID: id, State: Stopped, Host: Host{MachineID: testMachine, BootID: testBoot}}
		p, err := s.IssueBootProof(context.Background(), rec)
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != BootProofID(testMachine, testBoot, laterBoot, id) || p.RecordedBootID != testBoot || p.CurrentBootID != laterBoot || p.MachineID != testMachine || p.ClaimID != id {
			t.Errorf("proof = %+v", p)
		}
		rec.Proof = &Proof{Kind: ProofBoot, Ref: p.ID, raw: bootProofJSON(p.ID)}
		if err := s.VerifyProof(context.Background(), rec); err != nil {
			t.Errorf("VerifyProof of the proof just issued: %v", err)
		}
	})
}

// A host that cannot say its machine or boot issues no proof.
func TestIssueBootProofUnreadableHost(t *testing.T) {
	bad := errors.New("unreadable")
	for _, h := range []hostid.Host{brokenHost{thisHost, bad, nil}, brokenHost{thisHost, nil, bad}} {
		s := openStore(t, newRoot(t), &TOpts{Host: h})
		if p, err := s.IssueBootProof(context.Background(), &Record{ClaimID: "c" + strings.Repeat("a", 24), Host: Host{MachineID: testMachine, BootID: testBoot}}); !errors.Is(err, bad) || p != nil {
			t.Errorf("IssueBootProof on an unreadable host = %+v, %v; want the error", p, err)
		}
	}
}

type brokenHost struct {
	hostid.Host
	machine, boot error
}

func (h brokenHost) MachineID() (string, error) {
	if h.machine != nil {
		return "", h.machine
	}
	return h.Host.MachineID()
}

func (h brokenHost) BootID() (string, error) {
	if h.boot != nil {
		return "", h.boot
	}
	return h.Host.BootID()
}

// VerifyProof and ReadBootProof: a proof proves exactly one claim of one
// machine, ended with one recorded boot, and is read only in its own form.
func TestVerifyProofMismatches(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		s := openStore(t, newRoot(t), &TOpts{Host: hostid.Override{Host: thisHost, Boot: laterBoot}})
		id := "c" + strings.Repeat("b", 24)
		p, err := s.IssueBootProof(context.Background(), &Record{ClaimID: id, Host: Host{MachineID: testMachine, BootID: testBoot}})
		if err != nil {
			t.Fatal(err)
		}
		proof := &Proof{Kind: ProofBoot, Ref: p.ID, raw: bootProofJSON(p.ID)}
		for _, tc := range []struct {
			name string
			rec  Record
		}{
			{"another claim", Record{ClaimID: "c" + strings.Repeat("c", 24), Host: Host{MachineID: testMachine, BootID: testBoot}}},
			{"another machine", Record{ClaimID: id, Host: Host{MachineID: otherMachine, BootID: testBoot}}},
			{"another recorded boot", Record{ClaimID: id, Host: Host{MachineID: testMachine, BootID: laterBoot}}},
		} {
			rec := tc.rec
			rec.State, rec.Proof = Stopped, proof
			if err := s.VerifyProof(context.Background(), &rec); err == nil {
				t.Errorf("%s: VerifyProof = nil, want a mismatch", tc.name)
			}
		}
		// A proof file that observed no new boot proves nothing.
		same := BootProofID(testMachine, testBoot, testBoot, id)
		writeProofFile(t, s, same, `{"version":1,"kind":"boot-proof","id":"`+same+`","claimId":"`+id+`","machineId":"`+testMachine+`","recordedBootId":"`+testBoot+`","currentBootId":"`+testBoot+`","observedAt":"x"}`)
		rec := Record{ClaimID: id, State: Stopped, Host: Host{MachineID: testMachine, BootID: testBoot}, Proof: &Proof{Kind: ProofBoot, Ref: same, raw: bootProofJSON(same)}}
		if err := s.VerifyProof(context.Background(), &rec); err == nil {
			t.Error("VerifyProof of a proof that observed no new boot = nil")
		}
		// ReadBootProof reads only this store's ids, and only its own form.
		if _, err := s.ReadBootProof(context.Background(), "bp-1"); err == nil {
			t.Error("ReadBootProof(bp-1) = nil error")
		}
		for _, body := range []string{
			`{"version":2,"kind":"boot-proof","id":"ID"}`,
			`{"version":1,"kind":"other","id":"ID"}`,
			`{"version":1,"kind":"boot-proof","id":"boot-000000000000000000000000"}`,
			`not json`,
		} {
			bid := BootProofID(testMachine, testBoot, laterBoot, "c"+strings.Repeat("d", 24)+body[:1])
			writeProofFile(t, s, bid, strings.ReplaceAll(body, "ID", bid))
			if _, err := s.ReadBootProof(context.Background(), bid); err == nil {
				t.Errorf("ReadBootProof of %s = nil error", body)
			}
		}
	})
}

func writeProofFile(t *testing.T, s *Store, id, body string) {
	t.Helper()
	if onEtcd(s) {
		putProof(t, s, id, []byte(body+"\n"))
		return
	}
	if err := os.WriteFile(s.proofPath(id), []byte(body+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
}
