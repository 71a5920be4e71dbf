package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
)

// Environment variables claimctl reads.
const (
	envRoot = "CLAIMSTORE_ROOT"

	// Honoured only by the test binary (testHooks): never by a production
	// build, whose main does not set testHooks.
	envTestBootID    = "CLAIMCTL_TEST_BOOT_ID"
	envTestMachineID = "CLAIMCTL_TEST_MACHINE_ID"
)

// testHooks is set by the test binary's entry point only. When it is set,
// CLAIMCTL_TEST_BOOT_ID and CLAIMCTL_TEST_MACHINE_ID present another boot or
// machine, so that end-to-end tests can simulate a reboot or a foreign host.
var testHooks bool

// geteuid is os.Geteuid; tests replace it to reach the non-root default.
var geteuid = os.Geteuid

// env is what a command runs with: its streams and the process environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// host returns the machine facts to judge by.
func (e *env) host() hostid.Host {
	if !testHooks {
		return hostid.System
	}
	return hostid.Override{Host: hostid.System, Machine: e.getenv(envTestMachineID), Boot: e.getenv(envTestBootID)}
}

// rootChoice is the claim root and where it came from.
type rootChoice struct {
	Path    string
	Source  string // "--root", CLAIMSTORE_ROOT or "default"
	Default bool
}

// defaultRoot is the documented default claim root: /var/lib/claimstore for
// root, else $XDG_STATE_HOME/claimstore, else ~/.local/state/claimstore.
func (e *env) defaultRoot() (string, error) {
	if geteuid() == 0 {
		return "/var/lib/claimstore", nil
	}
	if x := e.getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "claimstore"), nil
	}
	home := e.getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("no default claim root: HOME is not an absolute path and XDG_STATE_HOME is not set; pass --root or set " + envRoot)
	}
	return filepath.Join(home, ".local", "state", "claimstore"), nil
}

// resolveRoot picks the root: --root, else CLAIMSTORE_ROOT, else the
// default. It is a usage error for --root or CLAIMSTORE_ROOT to be
// relative-looking nonsense such as the empty string.
func (e *env) resolveRoot(flagRoot string, flagSet bool) (rootChoice, error) {
	switch {
	case flagSet:
		if flagRoot == "" {
			return rootChoice{}, usagef("--root must not be empty")
		}
		return rootChoice{Path: abs(flagRoot), Source: "--root"}, nil
	case e.getenv(envRoot) != "":
		return rootChoice{Path: abs(e.getenv(envRoot)), Source: envRoot}, nil
	}
	p, err := e.defaultRoot()
	if err != nil {
		return rootChoice{}, usagef("%v", err)
	}
	return rootChoice{Path: p, Source: "default", Default: true}, nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// openStore opens the store on the chosen root. For a command that writes,
// the parent chain of the default root is created first (0700); a root
// named by --root or CLAIMSTORE_ROOT must have an existing parent. A command
// that only reads a root that does not exist sees an empty root: nothing is
// created.
func (e *env) openStore(rc rootChoice, write bool) (*claimstore.Store, error) {
	opts := &claimstore.Options{Host: e.host()}
	if write && rc.Default {
		if err := os.MkdirAll(filepath.Dir(rc.Path), 0o700); err != nil {
			return nil, fmt.Errorf("cannot create the parent of the default claim root %s: %w; create it, or pass --root", rc.Path, err)
		}
	}
	if !write {
		if _, err := os.Lstat(rc.Path); errors.Is(err, fs.ErrNotExist) {
			// A missing root under an ancestor others may write is what a
			// root renamed away by another user looks like: say so rather
			// than "nothing claimed".
			if err := claimstore.CheckRoot(rc.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("claim root %s (from %s): %w", rc.Path, rc.Source, err)
			}
			// A root that does not exist has no revisions. Reading it
			// through an empty backend that refuses every write makes
			// sure that reading creates nothing, whatever the store does.
			opts.Backend = emptyBackend{root: rc.Path}
		}
	}
	s, err := claimstore.Open(rc.Path, opts)
	if err != nil {
		return nil, fmt.Errorf("claim root %s (from %s): %w", rc.Path, rc.Source, err)
	}
	return s, nil
}

// rootMissing reports whether the chosen root does not exist, and notes it
// on standard error: a mistyped root reads as "nothing claimed", which an
// operator must not take for an answer about the real one.
func (e *env) rootMissing(cmd string, rc rootChoice) bool {
	if _, err := os.Lstat(rc.Path); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err := claimstore.CheckRoot(rc.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Not "nothing claimed": openStore refuses the root, saying why.
		return true
	}
	fmt.Fprintf(e.stderr, "claimctl %s: note: claim root %s (from %s) does not exist, so nothing has been claimed there; if the claims live elsewhere, pass --root or set %s\n", cmd, rc.Path, rc.Source, envRoot)
	return true
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminalFd(int(f.Fd()))
}

// emptyBackend is the claim root that does not exist: no keys, no
// revisions, no proofs, and no writes.
type emptyBackend struct{ root string }

func (b emptyBackend) errWrite() error {
	return &fs.PathError{Op: "write", Path: b.root, Err: errors.New("the claim root does not exist and this command only reads")}
}

func (emptyBackend) Head(claimstore.Loc) (uint64, []byte, error, error) { return 0, nil, nil, nil }
func (emptyBackend) Read(claimstore.Loc, uint64) ([]byte, error)        { return nil, fs.ErrNotExist }
func (b emptyBackend) Publish(claimstore.Loc, uint64, []byte, func(claimstore.Barrier) error) error {
	return b.errWrite()
}
func (emptyBackend) List(claimstore.Loc) ([]uint64, []string, error) { return nil, nil, nil }
func (emptyBackend) Locs(claimstore.Kind) ([]claimstore.Loc, error)  { return nil, nil }
func (b emptyBackend) WriteProof(string, []byte) error               { return b.errWrite() }
func (emptyBackend) ReadProof(string) ([]byte, error)                { return nil, fs.ErrNotExist }
func (emptyBackend) Proofs() ([]string, error)                       { return nil, nil }
func (emptyBackend) Sync(claimstore.Loc, uint64) error               { return nil }
func (b emptyBackend) Prepare(claimstore.Loc, uint64, []byte, func(claimstore.Barrier) error) (claimstore.Prepared, error) {
	return nil, b.errWrite()
}
