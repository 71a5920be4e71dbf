package claimstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/claimstore/claimstore/hostid"
)

// Severity grades a Check finding.
type Severity string

const (
	// SeverityError: the root breaks the format: a damaged or gapped key
	// (which reads as held), a key directory that is not one, or a stopped
	// revision whose boot proof does not check.
	SeverityError Severity = "error"
	// SeverityWarning: something the format does not name, harmless to
	// exclusion (a foreign file, a temporary whose writer may live).
	SeverityWarning Severity = "warning"
)

// Finding kinds.
const (
	FindingDamaged     = "damaged-revision"
	FindingGap         = "gap"
	FindingKeyMismatch = "key-mismatch"
	FindingForeign     = "foreign-file"
	FindingUnsafePath  = "unsafe-path"
	FindingTemporary   = "temporary"
	FindingProof       = "proof"
	FindingUnreadable  = "unreadable"
	// FindingUntrusted: a directory or file under the root that another
	// user owns or may write. Its key reads as held; fsck --repair never
	// changes ownership or modes.
	FindingUntrusted = "untrusted"
	// FindingUnusedProof: a boot proof that no revision names.
	FindingUnusedProof = "unused-proof"
)

// Finding is one problem Check found, with its path.
type Finding struct {
	Path     string
	Kind     string
	Severity Severity
	Message  string
	// Repairable is true when Repair may act: only for temporaries whose
	// writer is proven gone.
	Repairable bool
	Repaired   bool
	// RepairFailed is set when Repair tried and could not (a read-only
	// filesystem, a temporary that is a non-empty directory); Message
	// says why.
	RepairFailed bool
}

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
// every key directory holding revisions of its own key, boot proofs that
// stopped revisions name present and matching, and no stray files. With
// Repair it removes temporaries whose writers are proven gone, and says so.
// Its cost grows with the whole history of the root.
func (s *Store) Check(ctx context.Context, opts *CheckOptions) (*CheckReport, error) {
	if opts == nil {
		opts = &CheckOptions{}
	}
	rep := &CheckReport{}
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	db, _ := s.be.(*dirBackend)
	if db != nil {
		names, err := db.fs.ReadDir(s.root)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, err
		}
		for _, name := range names {
			switch name {
			case string(KindSeat), string(KindSession), ProofDir:
				db.checkType(filepath.Join(s.root, name), true, add)
			default:
				add(Finding{Path: filepath.Join(s.root, name), Kind: FindingForeign, Severity: SeverityWarning, Message: "not part of the claim root format; move it elsewhere"})
			}
		}
		for _, kind := range []Kind{KindSeat, KindSession} {
			dir := filepath.Join(s.root, string(kind))
			if ok, _, err := db.checkDir(dir); err != nil || !ok {
				continue // a symlink: reported above, and never followed
			}
			names, err := db.fs.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, name := range names {
				if !isKeyHash(name) {
					add(Finding{Path: filepath.Join(dir, name), Kind: FindingForeign, Severity: SeverityWarning, Message: "not a key directory (32 lowercase hex digits); move it elsewhere"})
				}
			}
		}
	}
	named := map[string]bool{} // boot proofs that revisions name
	var all []Loc
	for _, kind := range []Kind{KindSeat, KindSession} {
		locs, err := s.be.Locs(kind)
		if db != nil && errors.Is(err, ErrUnsafePath) {
			continue // a symlink: reported above; its keys are another directory's
		}
		if err != nil {
			return rep, err
		}
		all = append(all, locs...)
	}
	for i, loc := range all {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Keys++
		s.checkKey(loc, db, opts, rep, named, add)
		if opts.Progress != nil {
			opts.Progress(i+1, len(all))
		}
	}
	ids, err := s.be.Proofs()
	if err != nil {
		add(Finding{Path: s.path(ProofDir), Kind: FindingUnsafePath, Severity: SeverityError, Message: err.Error() + "; no boot proof in it can free a claim until this is fixed"})
	}
	for _, id := range ids {
		rep.Proofs++
		path := s.proofPath(id)
		if db != nil {
			db.checkType(path, false, add)
		}
		if _, err := s.ReadBootProof(id); err != nil {
			add(Finding{Path: path, Kind: FindingProof, Severity: SeverityWarning, Message: err.Error()})
		} else if !named[id] {
			add(Finding{Path: path, Kind: FindingUnusedProof, Severity: SeverityWarning, Message: "no revision names this boot proof: left by a classification cut before it published, or by an older version that issued one per classifier; it frees nothing by itself (remove it by hand if you wish)"})
		}
	}
	return rep, nil
}

func (s *Store) checkKey(loc Loc, db *dirBackend, opts *CheckOptions, rep *CheckReport, named map[string]bool, add func(Finding)) {
	dir := s.path(string(loc.Kind), loc.Hash)
	if db != nil {
		db.checkType(dir, true, add)
	}
	revs, other, err := s.be.List(loc)
	if err != nil {
		add(Finding{Path: dir, Kind: FindingUnsafePath, Severity: SeverityError, Message: err.Error() + "; the key reads as held until this is fixed"})
		return
	}
	var key *Key
	for i := len(revs) - 1; i >= 0 && key == nil; i-- {
		if data, err := s.be.Read(loc, revs[i]); err == nil {
			if k, ok := keyOf(data, loc); ok {
				key = &k
			}
		}
	}
	prev := uint64(0)
	for _, n := range revs {
		rep.Revisions++
		path := s.join(dir, RevisionName(n))
		if n != prev+1 {
			missing := fmt.Sprintf("revision %d is missing", prev+1)
			if n > prev+2 {
				missing = fmt.Sprintf("revisions %d to %d are missing", prev+1, n-1)
			}
			add(Finding{Path: path, Kind: FindingGap, Severity: SeverityError, Message: missing + ": revisions are numbered densely from 1, so some were lost or added by hand; the key reads as held (uncertain) until an operator restores them"})
		}
		prev = n
		if db != nil {
			db.checkType(path, false, add)
		}
		data, err := s.be.Read(loc, n)
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
			named[rec.Proof.Ref] = true
		}
		if rec.State == Stopped && rec.Proof != nil && rec.Proof.Kind == ProofBoot {
			if !isProofID(rec.Proof.Ref) {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityWarning, Message: fmt.Sprintf("boot proof %q was not issued by this implementation; it cannot be checked here", rec.Proof.Ref)})
			} else if err := s.VerifyProof(rec); err != nil {
				add(Finding{Path: path, Kind: FindingProof, Severity: SeverityError, Message: err.Error()})
			}
		}
	}
	for _, name := range other {
		path := s.join(dir, name)
		if !strings.HasPrefix(name, TempPrefix) {
			add(Finding{Path: path, Kind: FindingForeign, Severity: SeverityWarning, Message: "not a revision; the store ignores it; move it elsewhere"})
			continue
		}
		f := Finding{Path: path, Kind: FindingTemporary, Severity: SeverityWarning}
		owner, ok := tempOwner(name)
		if !ok {
			f.Message = "a temporary left by a writer this implementation cannot identify (the reference names them so); it is never a revision; remove it by hand once no writer runs"
			add(f)
			continue
		}
		state, why := hostid.Judge(s.host, owner)
		if state != hostid.Gone {
			f.Message = fmt.Sprintf("a temporary of a writer that may still run (%s: %s); left alone", state, why)
			add(f)
			continue
		}
		f.Repairable = true
		f.Message = "a temporary of a writer proven gone (" + why + ")"
		if opts.Repair && db != nil {
			switch err := db.fs.Remove(path); {
			case err != nil && !errors.Is(err, fs.ErrNotExist):
				f.RepairFailed = true
				f.Message += "; NOT removed: " + err.Error()
			default:
				if err := db.fs.SyncDir(dir); err != nil {
					f.RepairFailed = true
					f.Message += "; removed, but the removal may not survive a crash: " + err.Error()
				} else {
					f.Repaired = true
					f.Message += "; removed"
				}
			}
		}
		add(f)
	}
}

// checkType reports a path that is a symlink or of the wrong type.
func (b *dirBackend) checkType(path string, wantDir bool, add func(Finding)) {
	fi, err := b.fs.Lstat(path)
	if err != nil {
		add(Finding{Path: path, Kind: FindingUnreadable, Severity: SeverityError, Message: err.Error()})
		return
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		add(Finding{Path: path, Kind: FindingUnsafePath, Severity: SeverityError, Message: "a symlink; the store never follows it; replace it with the real directory or file"})
	case wantDir && !fi.IsDir():
		add(Finding{Path: path, Kind: FindingUnsafePath, Severity: SeverityError, Message: "not a directory"})
	case !wantDir && !fi.Mode().IsRegular():
		add(Finding{Path: path, Kind: FindingUnsafePath, Severity: SeverityError, Message: "not a regular file"})
	default:
		if err := b.trustInfo(path, fi); err != nil {
			add(Finding{Path: path, Kind: FindingUntrusted, Severity: SeverityError, Message: err.Error()})
		} else if !wantDir && fi.Mode().Perm()&0o222 != 0 {
			add(Finding{Path: path, Kind: FindingUnsafePath, Severity: SeverityWarning, Message: fmt.Sprintf("mode %v is writable; revisions are created 0400 and never rewritten", fi.Mode().Perm())})
		}
	}
}
