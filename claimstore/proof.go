package claimstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/claimstore/claimstore/hostid"
)

// BootProof is the durable record that a claim's boot has ended on this
// machine: the claim was taken under RecordedBootID, and CurrentBootID was
// observed on the same machine afterwards. Every process of a boot is gone
// once the machine has booted again, so this is proof that the claim's
// writer no longer runs. A stopped revision names it by ID.
type BootProof struct {
	Version        int    `json:"version"`
	Kind           string `json:"kind"` // "boot-proof"
	ID             string `json:"id"`
	ClaimID        string `json:"claimId"`
	MachineID      string `json:"machineId"`
	RecordedBootID string `json:"recordedBootId"`
	CurrentBootID  string `json:"currentBootId"`
	ObservedAt     string `json:"observedAt"`
}

// BootProofKind is the kind member of a boot proof file.
const BootProofKind = "boot-proof"

// ProofDir is the directory under the root that holds proof files.
const ProofDir = "proofs"

// isProofID reports whether id is one of this store's boot proof ids:
// "boot-" and 24 lowercase hex digits.
func isProofID(id string) bool {
	rest, ok := strings.CutPrefix(id, "boot-")
	return ok && isLowerHex(rest, 24)
}

// BootProofIssuer issues the boot proof a classification needs before it
// publishes stopped on a claim from an earlier boot. It returns the proof's
// id, or "" to decline (the pair then stays uncertain, needing a boot
// proof). The issuer must make the proof durable before returning.
type BootProofIssuer interface {
	IssueBootProof(ctx context.Context, rec *Record) (id string, err error)
}

// BootProofFunc adapts a function to a BootProofIssuer.
type BootProofFunc func(ctx context.Context, rec *Record) (string, error)

func (f BootProofFunc) IssueBootProof(ctx context.Context, rec *Record) (string, error) {
	return f(ctx, rec)
}

// NoBootProofs declines every boot proof: classification of a claim from
// an earlier boot then ends uncertain, needing a boot proof.
var NoBootProofs BootProofIssuer = BootProofFunc(func(context.Context, *Record) (string, error) { return "", nil })

// storeIssuer is the built-in issuer: it writes the proof under the root.
type storeIssuer struct{ s *Store }

func (i storeIssuer) IssueBootProof(ctx context.Context, rec *Record) (string, error) {
	p, err := i.s.IssueBootProof(ctx, rec)
	if err != nil {
		return "", err
	}
	return p.ID, nil
}

// IssueBootProof writes a boot proof for rec, durably and exclusively, after
// checking the evidence: the record was written on this machine, under a
// boot that is not the current one. It refuses otherwise.
//
// The proof's id is derived from what it proves (BootProofID), so that
// classifiers racing on the same claim after the same reboot issue one
// proof between them: the loser of the exclusive write finds the winner's
// proof, verifies it, and returns it. A file under that id that does not
// prove the same thing is an error (nothing is freed on it).
func (s *Store) IssueBootProof(ctx context.Context, rec *Record) (*BootProof, error) {
	machine, err := s.machineID()
	if err != nil {
		return nil, err
	}
	boot, err := s.host.BootID()
	if err != nil {
		return nil, err
	}
	if rec.Host.MachineID != machine {
		return nil, refuse(ForeignHost, rec.ClaimID, fmt.Sprintf("claim %s was taken on machine %q, not this machine %s; no boot proof can be issued here", rec.ClaimID, rec.Host.MachineID, machine), nil, rec.Key)
	}
	if !hostid.ValidBootID(rec.Host.BootID) || rec.Host.BootID == boot {
		return nil, refuse(UnsafeReplacement, rec.ClaimID, fmt.Sprintf("claim %s was taken under boot %q, which is not an earlier boot than %s", rec.ClaimID, rec.Host.BootID, boot), nil, rec.Key)
	}
	p := &BootProof{
		Version: 1, Kind: BootProofKind, ID: BootProofID(machine, rec.Host.BootID, boot, rec.ClaimID),
		ClaimID: rec.ClaimID, MachineID: machine, RecordedBootID: rec.Host.BootID, CurrentBootID: boot,
		ObservedAt: timestamp(s.now()),
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	err = s.be.WriteProof(ctx, p.ID, append(data, '\n'))
	if errors.Is(err, fs.ErrExist) {
		// Another classifier issued it first: the same evidence, the same id.
		have, rerr := s.ReadBootProof(ctx, p.ID)
		if rerr != nil {
			return nil, fmt.Errorf("boot proof %s exists but cannot be read: %w", p.ID, rerr)
		}
		if have.ClaimID != p.ClaimID || have.MachineID != p.MachineID || have.RecordedBootID != p.RecordedBootID || have.CurrentBootID != p.CurrentBootID {
			return nil, &fs.PathError{Op: "issue boot proof", Path: s.proofPath(p.ID), Err: fmt.Errorf("%w: it exists and proves something else (claim %s, boots %s -> %s); move it aside and run claimctl fsck", ErrUnsafePath, have.ClaimID, have.RecordedBootID, have.CurrentBootID)}
		}
		return have, nil
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// BootProofID returns the id of the boot proof that claim claimID, taken on
// machine under boot recorded, is over because the machine now runs boot
// current: "boot-" and 24 hex digits of a SHA-256 over the four. Every
// issuer of the same proof computes the same id.
func BootProofID(machine, recorded, current, claimID string) string {
	h := sha256.Sum256([]byte("claimstore boot proof v1\x00" + machine + "\x00" + recorded + "\x00" + current + "\x00" + claimID))
	return "boot-" + hex.EncodeToString(h[:12])
}

// ReadBootProof reads and validates the boot proof with the given id.
func (s *Store) ReadBootProof(ctx context.Context, id string) (*BootProof, error) {
	if !isProofID(id) {
		return nil, fmt.Errorf("%q is not a boot proof id of this store (boot-<24 hex>)", id)
	}
	data, err := s.be.ReadProof(ctx, id)
	if err != nil {
		return nil, err
	}
	var p BootProof
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, &fs.PathError{Op: "decode boot proof", Path: s.proofPath(id), Err: err}
	}
	if p.Version != 1 || p.Kind != BootProofKind || p.ID != id {
		return nil, &fs.PathError{Op: "decode boot proof", Path: s.proofPath(id), Err: errors.New("not a boot proof with this id")}
	}
	return &p, nil
}

func (s *Store) proofPath(id string) string { return s.Path(ProofDir, id+".json") }

// VerifyProof checks that a stopped revision's boot proof exists and
// matches the record: same claim, same machine, the record's boot, and a
// later boot observed; or that its decommission record (ProofDecommissioned)
// exists and covers the record's machine and boot. It returns nil for
// proofs of other kinds, which name evidence outside the store.
func (s *Store) VerifyProof(ctx context.Context, rec *Record) error {
	if rec.Proof != nil && rec.Proof.Kind == ProofDecommissioned {
		return s.verifyDecommissionProof(ctx, rec)
	}
	if rec.Proof == nil || rec.Proof.Kind != ProofBoot {
		return nil
	}
	p, err := s.ReadBootProof(ctx, rec.Proof.Ref)
	if err != nil {
		return err
	}
	switch {
	case p.ClaimID != rec.ClaimID:
		return fmt.Errorf("boot proof %s is for claim %s, not %s", p.ID, p.ClaimID, rec.ClaimID)
	case p.MachineID != rec.Host.MachineID:
		return fmt.Errorf("boot proof %s is for machine %s, not %s", p.ID, p.MachineID, rec.Host.MachineID)
	case p.RecordedBootID != rec.Host.BootID:
		return fmt.Errorf("boot proof %s records boot %s, but the claim was taken under %s", p.ID, p.RecordedBootID, rec.Host.BootID)
	case p.CurrentBootID == p.RecordedBootID:
		return fmt.Errorf("boot proof %s observed no new boot", p.ID)
	}
	return nil
}
