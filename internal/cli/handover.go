package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// etcdProgram is the program that serves etcd roots: claimctl with the etcd
// client linked (cmd/claimctl-etcd).
const etcdProgram = "claimctl-etcd"

// handOver replaces this process with claimctl-etcd, running the same
// command line with the same environment, standard streams and pid (so a
// supervisor's signals and exit status reach it unchanged). It returns
// only on failure, with an error that says how to get claimctl-etcd.
//
// It is called where the store is opened, before the command read or wrote
// anything of the root: the program that runs next starts the command from
// the beginning. A command that already wrote to standard output (none
// does before opening its store) is refused rather than run twice.
func (e *env) handOver() error {
	if !e.delegate {
		return errors.New("this program is built without the etcd client; etcd roots are served by " + etcdProgram)
	}
	if e.stdout.(*outWriter).wrote {
		return errors.New("cannot hand an etcd root to " + etcdProgram + " after writing output")
	}
	path, err := findEtcdProgram()
	if err != nil {
		return err
	}
	argv := append([]string{path}, e.args...)
	err = syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("etcd roots are served by %s, and running %s failed: %w", etcdProgram, path, err)
}

// findEtcdProgram looks for claimctl-etcd next to the running executable
// (an installation's own), then on $PATH. It never returns the running
// executable itself, which would hand the command back in a loop.
func findEtcdProgram() (string, error) {
	self, serr := os.Executable()
	if serr == nil {
		if resolved, rerr := filepath.EvalSymlinks(self); rerr == nil {
			self = resolved
		}
		p := filepath.Join(filepath.Dir(self), etcdProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && !sameFile(p, self) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(etcdProgram); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if !sameFile(p, self) {
			return p, nil
		}
	}
	return "", fmt.Errorf("etcd roots are served by %s, which is neither next to this program (%s) nor on $PATH: "+
		"install it beside claimctl: the claimstore-etcd package where claimctl came from the claimstore package, else `go install github.com/claimstore/claimstore/cmd/...` (or `go build -o DIR ./cmd/claimctl ./cmd/claimctl-etcd` in the source), or run claimctl-etcd itself; "+
		"claimctl links no etcd client, to keep its start-up short", etcdProgram, filepath.Dir(self))
}

// sameFile reports whether a and b name one file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
