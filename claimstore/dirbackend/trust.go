package dirbackend

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/safefile"
)

// MaxFileSize bounds what the store reads of a revision or a proof file. A
// record is a few hundred bytes; a file larger than this is damaged (its
// key reads as held), so that a planted or corrupted giant file cannot make
// every command that reads it allocate without bound.
const MaxFileSize = storage.MaxRecordSize

// The filesystem seam reads one byte past the same bound.
var _ = [1]struct{}{}[MaxFileSize-vfs.MaxFileSize]

// The trust chain. Exclusion rests on nobody but the root's owner being
// able to add, rename or remove entries anywhere on the path to a revision:
//
//   - every ancestor of the root (checkAncestors): a user who can write
//     into an ancestor can rename the root away, and the next writer would
//     silently create a fresh, empty root and win a claim whose owner is
//     still alive. Ancestors are checked as sshd's StrictModes checks a
//     home directory: owned by root or by this user, and not writable by
//     group or others unless the sticky bit stops others from renaming
//     entries they do not own (/tmp);
//   - the root itself (checkRootInfo): a real directory, owned by this
//     user or root, not writable by group or others;
//   - every directory below the root (seat/, session/, key directories,
//     proofs/) and every revision and proof file (trustInfo): owned by the
//     root's owner and not writable by group or others. Another user who
//     could write a key directory could plant a stopped revision (a free
//     key) or unlink the head; one who owns a revision could rewrite it.
//
// A key whose directory or head breaks this reads as damaged (held); a
// root or ancestor that breaks it is refused with storage.ErrUnsafeRoot. Nothing is
// ever "fixed" by chmod or chown: ownership is the operator's decision.

// checkAncestors refuses a root whose ancestors another user could write
// into. It resolves symlinks on the way (a symlink in a safe directory is
// as safe as its target's chain, which is checked too). Its cost is one
// lstat per path component, paid on every Open and before the first write.
func checkAncestors(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return &fs.PathError{Op: "open claim root", Path: root, Err: err}
	}
	return checkChain(root, filepath.Dir(abs), 0)
}

// geteuid is os.Geteuid; tests judge ancestors as another user would.
var geteuid = os.Geteuid

// checkChain checks dir and every ancestor of it. EvalSymlinks returns a
// path without symlinks, so the recursion is one deep unless the
// filesystem changes under the walk; depth bounds that.
func checkChain(root, dir string, depth int) error {
	if depth > 8 {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: too many levels of symlinks above it", storage.ErrUnsafeRoot)}
	}
	euid := geteuid()
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("its ancestor %s cannot be checked: %w", p, err)}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// The link itself sits in p's parent, which the loop checks
			// next; its target has a chain of its own.
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("its ancestor %s is a symlink that cannot be resolved: %w", p, err)}
			}
			if err := checkChain(root, target, depth+1); err != nil {
				return err
			}
		} else if why := ancestorProblem(fi, euid); why != "" {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: its ancestor %s %s, so another user could rename the root away and the next writer would start a new, empty one; %s", storage.ErrUnsafeRoot, p, why, ancestorFix(p, fi))}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// ancestorProblem says why a directory above the root cannot be trusted,
// or "".
func ancestorProblem(fi fs.FileInfo, euid int) string {
	if !fi.IsDir() {
		return "is not a directory"
	}
	if uid, ok := ownerUID(fi); ok && uid != 0 && uid != euid {
		return fmt.Sprintf("belongs to uid %d (neither root nor this user, uid %d)", uid, euid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return fmt.Sprintf("has mode %v: group or others may write into it, and no sticky bit stops them renaming what they do not own", fi.Mode().Perm())
	}
	return ""
}

func ancestorFix(p string, fi fs.FileInfo) string {
	if uid, ok := ownerUID(fi); ok && uid != 0 && uid != os.Geteuid() {
		return "use a root whose every ancestor belongs to root or to you"
	}
	return fmt.Sprintf("run chmod go-w %s (or chmod +t %s for a shared directory), or use a root elsewhere", p, p)
}

// rootUID returns the uid that must own everything under the root: the
// root's owner, or this user's when the root does not exist yet or the
// filesystem does not say. ok is false when the filesystem keeps no owners
// (the test filesystems), and only modes are checked.
func (b *Backend) rootUID() (uid int, ok bool) {
	b.mu.Lock()
	if b.uidKnown {
		defer b.mu.Unlock()
		return b.uid, b.uidOK
	}
	b.mu.Unlock()
	fi, err := b.fs.Lstat(b.root)
	if err != nil {
		// Not there yet: whoever creates it will own it; until then there
		// is nothing under it to check. Not remembered.
		return os.Geteuid(), true
	}
	uid, ok = ownerUID(fi)
	b.mu.Lock()
	b.uid, b.uidOK, b.uidKnown = uid, ok, true
	b.mu.Unlock()
	return uid, ok
}

// trustInfo says why a directory or file under the root cannot be trusted
// to promise exclusion (owned by another user than the root's, or writable
// by group or others), as an error wrapping storage.ErrUnsafePath that names the
// path and the fix; nil when it can. A file only its owner may write is
// trusted here (fsck warns: revisions are created 0400).
func (b *Backend) trustInfo(path string, fi fs.FileInfo) error {
	what := "file"
	if fi.IsDir() {
		what = "directory"
	}
	if want, ok := b.rootUID(); ok {
		if uid, has := ownerUID(fi); has && uid != want {
			return &fs.PathError{Op: "trust", Path: path, Err: fmt.Errorf("%w: this %s belongs to uid %d, not to the root's owner (uid %d); another user may have planted or rewritten it; it reads as held until an operator who knows its history restores it, owned by uid %d (claimctl fsck lists every such path)", storage.ErrUnsafePath, what, uid, want, want)}
		}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &fs.PathError{Op: "trust", Path: path, Err: fmt.Errorf("%w: this %s has mode %v, which lets group or others write it; it reads as held until an operator checks it and runs chmod go-w %s (claimctl fsck lists every such path)", storage.ErrUnsafePath, what, fi.Mode().Perm(), path)}
	}
	return nil
}

// readFile reads a revision or a proof file: bounded in size, never
// through a symlink, and only when the file can be trusted (trustInfo).
// Its directory is the caller's to check.
func (b *Backend) readFile(path string) ([]byte, error) {
	data, fi, err := b.fs.ReadFile(path)
	var big *vfs.TooLargeError
	switch {
	case errors.As(err, &big):
		return nil, tooLarge(path, big.Size)
	case errors.Is(err, vfs.ErrNotRegular):
		// A symlink or something else where a file belongs: never read
		// through, and the key reads as held.
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %w", storage.ErrUnsafePath, errors.Unwrap(err))}
	case err != nil:
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path, int64(len(data)))
	}
	if fi == nil {
		if fi, err = b.fs.Lstat(path); err != nil {
			return nil, err
		}
	}
	if err := b.trustInfo(path, fi); err != nil {
		return nil, err
	}
	return data, nil
}

func tooLarge(path string, size int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: &storage.DamageError{Reason: fmt.Sprintf("the file holds %d bytes, more than the %d a revision or proof may have; it is not read, and its key reads as held (move it aside and run claimctl fsck)", size, MaxFileSize)}}
}

// isTrustError reports whether err is a trust refusal from trustInfo.
func isTrustError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "trust"
}

// trimFix drops the operator advice from a trust error's text, for places
// that add their own.
func trimFix(s string) string {
	if i := strings.Index(s, "; it reads as held"); i >= 0 {
		return s[:i]
	}
	return s
}

// CheckRoot is what Open checks of a root on the operating system's
// filesystem: the root, if it exists, and its every ancestor. A caller
// that reads a root some other way (a command that finds the root missing
// and reads it as empty) checks it with this, so that a root renamed away
// by another user is not read as "nothing claimed".
func CheckRoot(root string) error { return checkRoot(filepath.Clean(root)) }

// checkRoot refuses a root that cannot promise exclusion.
func checkRoot(root string) error {
	fi, err := os.Lstat(root)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(root)
		pfi, perr := os.Stat(parent)
		if perr != nil {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("its parent cannot be used: %w; create %s first", perr, parent)}
		}
		if !pfi.IsDir() {
			return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: parent %s is not a directory", storage.ErrUnsafeRoot, parent)}
		}
		return checkAncestors(root)
	}
	if err != nil {
		return &fs.PathError{Op: "open claim root", Path: root, Err: err}
	}
	if err := checkRootInfo(root, fi); err != nil {
		return err
	}
	return checkAncestors(root)
}

// checkRootInfo refuses an existing root that is a symlink, not a
// directory, writable by others, or owned by another user.
func checkRootInfo(root string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := filepath.EvalSymlinks(root)
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it is a symlink (to %q); use the real directory as the root", storage.ErrUnsafeRoot, target)}
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it is %s, not a directory; a claim root is a directory (move it aside, or pass another root)", storage.ErrUnsafeRoot, safefile.Describe(fi.Mode()))}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: mode %v lets other users write into it; run chmod go-w %s", storage.ErrUnsafeRoot, fi.Mode().Perm(), root)}
	}
	if uid, ok := ownerUID(fi); ok && uid != os.Geteuid() && uid != 0 {
		return &fs.PathError{Op: "open claim root", Path: root, Err: fmt.Errorf("%w: it belongs to uid %d, not to this user (uid %d); use a root of your own", storage.ErrUnsafeRoot, uid, os.Geteuid())}
	}
	return nil
}

// ownerUID returns the uid owning fi, where the platform says.
func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
