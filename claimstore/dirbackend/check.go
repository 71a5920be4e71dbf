package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// CheckLayout implements storage.LayoutChecker: every name in the root and
// in its kind and status directories that the format does not have, and the
// types and trust of the root's own directories and status records. A kind directory that is a symlink
// is reported, and never listed through.
func (b *Backend) CheckLayout(ctx context.Context, report func(storage.Finding)) error {
	names, err := b.fs.ReadDir(b.root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		switch name {
		case string(storage.KindSeat), string(storage.KindSession), ProofDir, ArchiveDir:
			b.checkType(filepath.Join(b.root, name), true, report)
		case storage.StatusDir:
			b.checkStatusDir(report)
		default:
			report(storage.Finding{Path: filepath.Join(b.root, name), Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: "not part of the claim root format; move it elsewhere"})
		}
	}
	for _, kind := range []storage.Kind{storage.KindSeat, storage.KindSession} {
		dir := filepath.Join(b.root, string(kind))
		if ok, _, err := b.checkDir(dir); err != nil || !ok {
			continue // a symlink: reported above, and never followed
		}
		names, err := b.fs.ReadDir(dir)
		if err != nil {
			continue
		}
		sort.Strings(names)
		for _, name := range names {
			if strings.HasPrefix(name, TrashPrefix) {
				report(storage.Finding{Path: filepath.Join(dir, name), Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: "a key directory claimctl prune removed from the root and had not finished deleting; no reader sees it; the next claimctl prune deletes it"})
				continue
			}
			if !storage.IsKeyHash(name) {
				report(storage.Finding{Path: filepath.Join(dir, name), Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: "not a key directory (32 lowercase hex digits); move it elsewhere"})
			}
		}
	}
	return nil
}

// CheckKey implements storage.LayoutChecker: the key directory's type and
// trust, each revision file's, and the names in it that are not revisions:
// temporaries (judged, and with repair removed when their writer is proven
// gone) and foreign files.
func (b *Backend) CheckKey(ctx context.Context, loc storage.Loc, repair bool, judge storage.TempJudge, report func(storage.Finding)) {
	dir := b.dir(loc)
	b.checkType(dir, true, report)
	if ok, _, err := b.checkKeyDir(dir); err != nil || !ok {
		return // the store reports why the key cannot be listed
	}
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		return
	}
	sort.Strings(names)
	base, baseErr := b.readBase(loc)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if n, ok := storage.ParseRevisionName(name); ok {
			b.checkType(path, false, report)
			if baseErr == nil && n < base {
				report(storage.Finding{Path: path, Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: fmt.Sprintf("below the key's base revision %d: left by a compaction that stopped before removing it; no reader sees it; the next claimctl prune removes it", base)})
			}
			continue
		}
		switch {
		case name == BaseName:
			b.checkType(path, false, report)
			if baseErr != nil {
				report(storage.Finding{Path: path, Kind: storage.FindingDamaged, Severity: storage.SeverityError, Message: baseErr.Error()})
			}
			continue
		case strings.HasPrefix(name, baseStagePrefix):
			report(storage.Finding{Path: path, Kind: storage.FindingTemporary, Severity: storage.SeverityWarning, Message: "a base pointer a compaction was writing when it stopped; it is never read; the next claimctl prune removes it"})
			continue
		}
		if !strings.HasPrefix(name, vfs.TempPrefix) {
			report(storage.Finding{Path: path, Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: "not a revision; the store ignores it; move it elsewhere"})
			continue
		}
		f := storage.Finding{Path: path, Kind: storage.FindingTemporary, Severity: storage.SeverityWarning}
		owner, ok := vfs.TempOwner(name)
		if !ok {
			f.Message = "a temporary left by a writer this implementation cannot identify (the reference names them so); it is never a revision; remove it by hand once no writer runs"
			report(f)
			continue
		}
		gone, why := judge(storage.TempWriter{PID: owner.PID, Start: owner.Start, Boot: owner.Boot, PIDNS: owner.PIDNS})
		if !gone {
			f.Message = fmt.Sprintf("a temporary of a writer that may still run (%s); left alone", why)
			report(f)
			continue
		}
		f.Repairable = true
		f.Message = "a temporary of a writer proven gone (" + why + ")"
		if repair {
			switch err := b.fs.Remove(path); {
			case err != nil && !errors.Is(err, fs.ErrNotExist):
				f.RepairFailed = true
				f.Message += "; NOT removed: " + err.Error()
			default:
				if err := b.fs.SyncDir(dir); err != nil {
					f.RepairFailed = true
					f.Message += "; removed, but the removal may not survive a crash: " + err.Error()
				} else {
					f.Repaired = true
					f.Message += "; removed"
				}
			}
		}
		report(f)
	}
}

// CheckProof implements storage.LayoutChecker: the proof file's type and
// trust.
func (b *Backend) CheckProof(ctx context.Context, id string, report func(storage.Finding)) {
	b.checkType(filepath.Join(b.proofDir(), id+".json"), false, report)
}

// checkType reports a path that is a symlink or of the wrong type.
func (b *Backend) checkType(path string, wantDir bool, report func(storage.Finding)) {
	fi, err := b.fs.Lstat(path)
	if err != nil {
		report(storage.Finding{Path: path, Kind: storage.FindingUnreadable, Severity: storage.SeverityError, Message: err.Error()})
		return
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		report(storage.Finding{Path: path, Kind: storage.FindingUnsafePath, Severity: storage.SeverityError, Message: "a symlink; the store never follows it; replace it with the real directory or file"})
	case wantDir && !fi.IsDir():
		report(storage.Finding{Path: path, Kind: storage.FindingUnsafePath, Severity: storage.SeverityError, Message: "not a directory"})
	case !wantDir && !fi.Mode().IsRegular():
		report(storage.Finding{Path: path, Kind: storage.FindingUnsafePath, Severity: storage.SeverityError, Message: "not a regular file"})
	default:
		if err := b.trustInfo(path, fi); err != nil {
			report(storage.Finding{Path: path, Kind: storage.FindingUntrusted, Severity: storage.SeverityError, Message: err.Error()})
		} else if !wantDir && fi.Mode().Perm()&0o222 != 0 {
			report(storage.Finding{Path: path, Kind: storage.FindingUnsafePath, Severity: storage.SeverityWarning, Message: fmt.Sprintf("mode %v is writable; revisions are created 0400 and never rewritten", fi.Mode().Perm())})
		}
	}
}

// checkStatusDir reports what is wrong with status/ and the records in it
// (storage.StatusKeeper): its type and trust, each record's, a temporary a
// status write cut by a crash left (harmless: never a record, and never
// read), and any other name.
func (b *Backend) checkStatusDir(report func(storage.Finding)) {
	dir := b.statusDir()
	b.checkType(dir, true, report)
	if ok, _, err := b.checkDir(dir); err != nil || !ok {
		return // a symlink or not a directory: reported above, never followed
	}
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		return
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		switch base, isJSON := strings.CutSuffix(name, ".json"); {
		case isJSON && storage.ValidStatusName(base):
			b.checkType(path, false, report)
		case strings.HasPrefix(name, vfs.TempPrefix):
			report(storage.Finding{Path: path, Kind: storage.FindingTemporary, Severity: storage.SeverityWarning, Message: "a temporary of a status write that did not finish (a crash, or a status write that failed); it is never read and frees nothing; remove it by hand"})
		default:
			report(storage.Finding{Path: path, Kind: storage.FindingForeign, Severity: storage.SeverityWarning, Message: "not a status record; the store ignores it; move it elsewhere"})
		}
	}
}
