package claimstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/hostid"
)

// Severity grades a Check finding (see storage.Severity).
type Severity = storage.Severity

const (
	// SeverityError: the root breaks the format: a damaged or gapped key
	// (which reads as held), a key directory that is not one, or a stopped
	// revision whose boot proof does not check.
	SeverityError = storage.SeverityError
	// SeverityWarning: something the format does not name, harmless to
	// exclusion (a foreign file, a temporary whose writer may live).
	SeverityWarning = storage.SeverityWarning
)

// Finding kinds.
const (
	FindingDamaged     = storage.FindingDamaged
	FindingGap         = storage.FindingGap
	FindingKeyMismatch = storage.FindingKeyMismatch
	FindingForeign     = storage.FindingForeign
	FindingUnsafePath  = storage.FindingUnsafePath
	FindingTemporary   = storage.FindingTemporary
	FindingProof       = storage.FindingProof
	FindingUnreadable  = storage.FindingUnreadable
	FindingUntrusted   = storage.FindingUntrusted
	FindingUnusedProof = storage.FindingUnusedProof
)

// Finding is one problem Check found, with its path.
type Finding = storage.Finding

// CheckOptions configure Check. A nil *CheckOptions checks only.
type CheckOptions struct {
	// Repair removes what is provably safe to remove: temporaries of
	// writers proven gone. Nothing else is ever changed.
	Repair bool
	// Progress, if set, is called after each key is checked with the
	// number checked so far and the number of keys to check, from the
	// goroutine that called Check.
	Progress func(done, total int)
}

// CheckReport is what Check found.
type CheckReport struct {
	Keys, Revisions, Proofs int
	Findings                []Finding
}

// Errors counts the findings of severity error.
func (r *CheckReport) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			n++
		}
	}
	return n
}

// Check verifies a whole root: every revision valid and numbered densely,
// every key holding revisions of its own key, boot proofs that stopped
// revisions name present and matching, and, where the backend has a layout
// of its own to check (storage.LayoutChecker: the directory backend's
// files, types, owners, modes and temporaries), that too. With Repair it
// removes temporaries whose writers are proven gone, and says so. Its cost
// grows with the whole history of the root.
func (s *Store) Check(ctx context.Context, opts *CheckOptions) (*CheckReport, error) {
	if opts == nil {
		opts = &CheckOptions{}
	}
	rep := &CheckReport{}
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	layout, _ := s.be.(storage.LayoutChecker)
	if layout != nil {
		if err := layout.CheckLayout(ctx, add); err != nil {
			return rep, err
		}
	}
	// Boot proofs that revisions name.
	named := map[string]bool{}
	var namedMu sync.Mutex
	name := func(id string) {
		namedMu.Lock()
		named[id] = true
		namedMu.Unlock()
	}
	// A kind directory that is a symlink is reported by the layout check;
	// its keys are another directory's, and are not checked.
	all, err := s.keyLocs(ctx, layout != nil)
	if err != nil {
		return rep, err
	}
	// Keys are checked walkReaders at once, as a walk reads them: one at a
	// time, a root's revisions were read with at most one read in flight,
	// four times a walk's time. Each chunk's findings are reported in the
	// keys' order once the chunk is checked, so that the report is the
	// same whatever order the checks end in, and what is held at once is
	// one chunk's findings.
	for start := 0; start < len(all); start += checkChunk {
		part := all[start:min(start+checkChunk, len(all))]
		found := make([][]Finding, len(part))
		revisions := make([]int, len(part))
		inParallel(len(part), walkReaders, func(i int) {
			if ctx.Err() == nil {
				revisions[i] = s.checkKey(ctx, part[i], layout, opts, name, func(f Finding) { found[i] = append(found[i], f) })
			}
		})
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		for i := range part {
			rep.Keys++
			rep.Revisions += revisions[i]
			for _, f := range found[i] {
				add(f)
			}
			if opts.Progress != nil {
				opts.Progress(start+i+1, len(all))
			}
		}
	}
	ids, err := s.be.Proofs(ctx)
	if err != nil {
		add(Finding{Path: s.Path(ProofDir), Kind: FindingUnsafePath, Severity: SeverityError, Message: err.Error() + "; no boot proof in it can free a claim until this is fixed"})
	}
	for _, id := range ids {
		rep.Proofs++
		path := s.proofPath(id)
		if layout != nil {
			layout.CheckProof(ctx, id, add)
		}
		if strings.HasPrefix(id, decommissionPrefix) {
			// An operator's record: it frees by itself (classify reads
			// it), so no revision need name it; it must only be whole.
			if _, err := s.ReadDecommission(ctx, id); err != nil {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityError, Message: err.Error() + "; the machine it names cannot be told decommissioned or not: acquire there refuses and classify frees nothing on it until it is restored"})
			}
			continue
		}
		if _, err := s.ReadBootProof(ctx, id); err != nil {
			add(Finding{Path: path, Kind: FindingProof, Severity: SeverityWarning, Message: err.Error()})
		} else if !named[id] {
			add(Finding{Path: path, Kind: FindingUnusedProof, Severity: SeverityWarning, Message: "no revision names this boot proof: left by a classification cut before it published, or by an older version that issued one per classifier; it frees nothing by itself (remove it by hand if you wish)"})
		}
	}
	return rep, nil
}

// judgeTemp judges the writer a temporary's name records, on this store's
// host, for the layout check's repair.
func (s *Store) judgeTemp(w storage.TempWriter) (bool, string) {
	state, why := hostid.Judge(s.host, hostid.Owner{PID: w.PID, Start: w.Start, Boot: w.Boot, PIDNS: w.PIDNS})
	if state != hostid.Gone {
		return false, fmt.Sprintf("%s: %s", state, why)
	}
	return true, why
}

// checkChunk is how many keys Check checks before it reports their
// findings.
const checkChunk = 1024

// checkKey checks one key, reports its findings to add and the boot proofs
// its revisions name to noteProof, and returns how many revisions it
// listed. It is called for several keys at once.
func (s *Store) checkKey(ctx context.Context, loc Loc, layout storage.LayoutChecker, opts *CheckOptions, noteProof func(string), add func(Finding)) int {
	dir := s.Path(string(loc.Kind), loc.Hash)
	if layout != nil {
		layout.CheckKey(ctx, loc, opts.Repair, s.judgeTemp, add)
	}
	base, revs, other, err := s.list(ctx, loc)
	if err != nil {
		add(Finding{Path: dir, Kind: FindingUnsafePath, Severity: SeverityError, Message: err.Error() + "; the key reads as held until this is fixed"})
		return 0
	}
	// The key is named by its newest readable revision; the one read to
	// find it is not read again below.
	var key *Key
	var keyN uint64
	var keyData []byte
	for i := len(revs) - 1; i >= 0 && key == nil; i-- {
		if data, err := s.be.Read(ctx, loc, revs[i]); err == nil {
			if k, ok := keyOf(data, loc); ok {
				key, keyN, keyData = &k, revs[i], data
			}
		}
	}
	prev := base - 1
	for _, n := range revs {
		path := s.Path(string(loc.Kind), loc.Hash, RevisionName(n))
		if n != prev+1 {
			missing := fmt.Sprintf("revision %d is missing", prev+1)
			if n > prev+2 {
				missing = fmt.Sprintf("revisions %d to %d are missing", prev+1, n-1)
			}
			add(Finding{Path: path, Kind: FindingGap, Severity: SeverityError, Message: missing + ": revisions are numbered densely from 1, so some were lost or added by hand; the key reads as held (uncertain) until an operator restores them"})
		}
		prev = n
		data, err := keyData, error(nil)
		if key == nil || n != keyN {
			data, err = s.be.Read(ctx, loc, n)
		}
		if err != nil {
			add(Finding{Path: path, Kind: FindingUnreadable, Severity: SeverityError, Message: err.Error()})
			continue
		}
		if key == nil {
			add(Finding{Path: path, Kind: FindingKeyMismatch, Severity: SeverityError, Message: "no revision of this directory names a key that hashes to its name"})
			continue
		}
		rec, err := DecodeRecord(data, *key, n)
		if err != nil {
			msg := err.Error()
			if n == revs[len(revs)-1] {
				msg += "; it is the head, so the key reads as uncertain (held)"
			}
			add(Finding{Path: path, Kind: FindingDamaged, Severity: SeverityError, Message: msg})
			continue
		}
		if rec.Proof != nil && rec.Proof.Kind == ProofBoot {
			noteProof(rec.Proof.Ref)
		}
		if rec.State == Stopped && rec.Proof != nil && rec.Proof.Kind == ProofBoot {
			if !isProofID(rec.Proof.Ref) {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityWarning, Message: fmt.Sprintf("boot proof %q was not issued by this implementation; it cannot be checked here", rec.Proof.Ref)})
			} else if err := s.VerifyProof(ctx, rec); err != nil {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityError, Message: err.Error()})
			}
		}
		if rec.State == Stopped && rec.Proof != nil && rec.Proof.Kind == ProofDecommissioned {
			if err := s.VerifyProof(ctx, rec); err != nil {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityError, Message: err.Error()})
			}
		}
	}
	if layout == nil {
		// The layout check reports the names that are not revisions where
		// there is one (with what they are: temporaries, strays).
		for _, name := range other {
			add(Finding{Path: s.Path(string(loc.Kind), loc.Hash, name), Kind: FindingForeign, Severity: SeverityWarning, Message: "not a revision; the store ignores it; move it elsewhere"})
		}
	}
	return len(revs)
}
