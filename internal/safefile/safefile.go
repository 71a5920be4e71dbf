// Package safefile opens files and directories that someone else may have
// replaced: another local user, a restored backup, a damaged disk. It never
// blocks on what it finds (a FIFO, a device or a socket where a file or a
// directory belongs) and refuses the wrong type of file with its path.
//
// os.Open on a FIFO waits for a writer, forever; os.ReadFile of a character
// device may never end. Every open here is non-blocking (O_NONBLOCK), the
// type is checked on the open descriptor (fstat, so that the answer is about
// the file that was opened, not one put in its place since), and reads are
// bounded.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrWrongType is returned, wrapped in an *fs.PathError naming the path,
// when a path is not the type of file asked for: a FIFO, a socket, a
// device or a directory where a regular file belongs, or anything but a
// directory where a directory belongs.
var ErrWrongType = errors.New("not the expected type of file")

// TypeError says what a path is when it is not what it should be.
type TypeError struct {
	Want string      // "a regular file", "a directory"
	Mode fs.FileMode // what it is
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("it is %s, not %s", Describe(e.Mode), e.Want)
}

func (e *TypeError) Unwrap() error { return ErrWrongType }

// Describe names the type of a file mode for a message: "a FIFO", "a
// socket", "a symlink", "a character device", "a block device", "a
// directory" or "a regular file".
func Describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "a file of unknown type"
}

// Options say how to open a path.
type Options struct {
	// Follow lets a final symlink be followed (a certificate installed as
	// a link); by default a symlink is refused (ELOOP), as the claim root
	// never follows one.
	Follow bool
}

func flags(base int, opts *Options) int {
	f := base | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if opts == nil || !opts.Follow {
		f |= syscall.O_NOFOLLOW
	}
	return f
}

// ReadFile is like os.ReadFile, but opens name without blocking, reads
// only a regular file (anything else is an *fs.PathError wrapping a
// *TypeError), and reads at most limit+1 bytes: a caller that gets more
// than limit knows the file is too large, and memory stays bounded whatever
// the file does while it is read.
func ReadFile(name string, limit int64, opts *Options) ([]byte, error) {
	f, err := os.OpenFile(name, flags(os.O_RDONLY, opts), 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: &TypeError{Want: "a regular file", Mode: fi.Mode()}}
	}
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// OpenDir opens a directory for reading its names or fsyncing it, without
// blocking and without following a final symlink: anything that is not a
// directory is an *fs.PathError wrapping a *TypeError (or ELOOP for a
// symlink), found without ever opening it for reading.
func OpenDir(name string) (*os.File, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: &TypeError{Want: "a directory", Mode: fi.Mode()}}
	}
	// O_DIRECTORY makes the open fail rather than open whatever was put
	// at name since the Lstat.
	return os.OpenFile(name, flags(os.O_RDONLY|syscall.O_DIRECTORY, nil), 0)
}
