package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/internal/safefile"
)

// Environment variables claimctl reads.
const (
	envRoot = "CLAIMSTORE_ROOT"

	// Honoured only by the test binary (testHooks): never by a production
	// build, whose main does not set testHooks.
	envTestBootID    = "CLAIMCTL_TEST_BOOT_ID"
	envTestMachineID = "CLAIMCTL_TEST_MACHINE_ID"
	// A file to read the machine id from instead of /etc/machine-id, to
	// test a missing, empty or malformed one.
	envTestMachineIDFile = "CLAIMCTL_TEST_MACHINE_ID_FILE"
	// "session-link": linking a session key's revision fails with ENOSPC
	// (a step cut between its keys by an I/O error: the seat revision is
	// published, the session revision prepared but not linked). A failure
	// while preparing the session revision publishes neither.
	// "after-start": claimctl run blocks, until it is killed, right after
	// its starter returned and before it publishes active (a supervisor
	// killed between the spawn marker and active).
	envTestFail = "CLAIMCTL_TEST_FAIL"
	// A file that wait and log --follow create once their stop signals are
	// caught: a test sends a signal after it exists, not after a guessed
	// sleep (a signal before it would kill the process by default, which is
	// the start-up's window, not the behaviour under test).
	envTestSignalsArmed = "CLAIMCTL_TEST_SIGNALS_ARMED"
)

// signalsArmed tells a test (envTestSignalsArmed) that the command's stop
// signals are caught from now on.
func (e *env) signalsArmed() {
	if !testHooks {
		return
	}
	if f := e.getenv(envTestSignalsArmed); f != "" {
		os.WriteFile(f, []byte("armed\n"), 0o600)
	}
}

// testHooks is set by the test binary's entry point only. When it is set,
// CLAIMCTL_TEST_BOOT_ID and CLAIMCTL_TEST_MACHINE_ID present another boot or
// machine, so that end-to-end tests can simulate a reboot or a foreign host.
var testHooks bool

// geteuid is os.Geteuid; tests replace it to reach the non-root default.
var geteuid = os.Geteuid

// env is what a command runs with: its streams and the process environment.
type env struct {
	// ctx is the command's context: what a command does on a root runs
	// under it (a command that waits or is stopped by signals derives its
	// own from it).
	ctx context.Context

	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	conn connFlags // how to reach an etcd root, from the command line
	opts *Options  // never nil

	// args are the command line as given, and delegate whether a command
	// on an etcd root may be handed to claimctl-etcd with them (Main).
	args     []string
	delegate bool

	cmdName string // the command run, for messages
	// done says what the command did on disk, for the write error message
	// when its output could not be written: "claim c… was acquired …".
	done string

	progressStart time.Time
	progressLast  time.Time
	progressNoun  string
	progressShown bool
}

// host returns the machine facts to judge by.
func (e *env) host() hostid.Host {
	if !testHooks {
		return hostid.System
	}
	base := hostid.System
	if f := e.getenv(envTestMachineIDFile); f != "" {
		base = hostid.FromFiles([]string{f}, "")
	}
	return hostid.Override{Host: base, Machine: e.getenv(envTestMachineID), Boot: e.getenv(envTestBootID)}
}

// checkMachineID fails a command that judges or takes claims when this
// machine's own id cannot be read. Without it every claim would compare
// unequal to "this machine" and read as another machine's (foreign-host):
// the operator would go looking for a machine that does not exist, when
// the fault is this one's configuration.
func (e *env) checkMachineID() error {
	if _, err := e.host().MachineID(); err != nil {
		return fmt.Errorf("this machine's id cannot be read (%v): this machine is misconfigured — nothing here says the claims belong to another machine; "+
			"fix it as root with `systemd-machine-id-setup` (or write the machine's id, 32 lowercase hex digits and a newline, to /etc/machine-id), then run claimctl again; "+
			"if the id changed, claims taken under the old id read as another machine's until the old id is restored (see `claimctl help root`)", err)
	}
	return nil
}

// rootChoice is the claim root and where it came from.
type rootChoice struct {
	Path    string
	Source  string // "--root", CLAIMSTORE_ROOT or "default"
	Default bool
	Etcd    bool // Path is an etcd root URL (etcd://host:2379/prefix)
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
		if err := checkRootURL(flagRoot, "--root"); err != nil {
			return rootChoice{}, err
		}
		if isEtcdRoot(flagRoot) {
			return rootChoice{Path: flagRoot, Source: "--root", Etcd: true}, nil
		}
		return rootChoice{Path: abs(flagRoot), Source: "--root"}, nil
	case e.getenv(envRoot) != "":
		v := e.getenv(envRoot)
		if err := checkRootURL(v, envRoot); err != nil {
			return rootChoice{}, err
		}
		if !isEtcdRoot(v) && !filepath.IsAbs(v) {
			// The environment outlives the working directory it was set
			// in: a relative root names another root from every directory a
			// supervisor runs in, and two acquires from two directories would
			// both win the same pair. --root, given with each command, is
			// resolved against the working directory and printed.
			return rootChoice{}, usagef("%s=%s is a relative path: it would name a different claim root from every working directory, and two supervisors started in two directories would both win the same pair; set it to an absolute path (e.g. %s=\"$PWD/…\"), or pass --root", envRoot, quotePrefix(v), envRoot)
		}
		if isEtcdRoot(v) {
			return rootChoice{Path: v, Source: envRoot, Etcd: true}, nil
		}
		return rootChoice{Path: abs(v), Source: envRoot}, nil
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
	if testHooks && e.getenv(envTestFail) == "session-link" {
		opts.Barrier = func(p claimstore.Point) error {
			// Between the keys: the seat revision is durable, the session
			// revision prepared and about to be linked.
			if p.Barrier == claimstore.BarrierBetweenKeys {
				session := rootJoin(rc.Path, string(claimstore.KindSession))
				return &fs.PathError{Op: "link", Path: session, Err: syscall.ENOSPC}
			}
			return nil
		}
	}
	if rc.Etcd {
		s, err := e.openEtcdStore(rc, opts)
		if err != nil {
			return nil, fmt.Errorf("claim root %s (from %s): %w", rc.Path, rc.Source, err)
		}
		return s, nil
	}
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
			if err := dirbackend.CheckRoot(rc.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("claim root %s (from %s): %w", rc.Path, rc.Source, err)
			}
			// A root that does not exist has no revisions. Reading it
			// through an empty backend that refuses every write makes
			// sure that reading creates nothing, whatever the store does.
			return claimstore.New(emptyBackend{root: rc.Path}, opts)
		}
	}
	be, err := dirbackend.Open(rc.Path, nil)
	if err != nil {
		return nil, fmt.Errorf("claim root %s (from %s): %w", rc.Path, rc.Source, err)
	}
	return claimstore.New(be, opts)
}

// rootMissing reports whether the chosen root does not exist, and notes it
// on standard error: a mistyped root reads as "nothing claimed", which an
// operator must not take for an answer about the real one.
func (e *env) rootMissing(cmd string, rc rootChoice) bool {
	if rc.Etcd {
		return false // an etcd root exists as soon as its cluster does
	}
	if _, err := os.Lstat(rc.Path); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err := dirbackend.CheckRoot(rc.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Not "nothing claimed": openStore refuses the root, saying why.
		return true
	}
	fmt.Fprintf(e.stderr, "claimctl %s: note: claim root %s (from %s) does not exist, so nothing has been claimed there; if the claims live elsewhere, pass --root or set %s\n", cmd, rc.Path, rc.Source, envRoot)
	return true
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	if o, ok := w.(*outWriter); ok {
		w = o.w
	}
	f, ok := w.(*os.File)
	return ok && isTerminalFd(int(f.Fd()))
}

// emptyBackend is the claim root that does not exist: no keys, no
// revisions, no proofs, and no writes.
type emptyBackend struct{ root string }

var _ claimstore.Backend = emptyBackend{}

func (b emptyBackend) errWrite() error {
	return &fs.PathError{Op: "write", Path: b.root, Err: errors.New("the claim root does not exist and this command only reads")}
}

func (b emptyBackend) Root() string { return b.root }
func (b emptyBackend) Path(elem ...string) string {
	return filepath.Join(append([]string{b.root}, elem...)...)
}
func (emptyBackend) Head(context.Context, claimstore.Loc) (uint64, []byte, error) {
	return 0, nil, nil
}
func (emptyBackend) Read(context.Context, claimstore.Loc, uint64) ([]byte, error) {
	return nil, fs.ErrNotExist
}
func (b emptyBackend) Publish(context.Context, claimstore.Loc, uint64, []byte, func(claimstore.Barrier) error) error {
	return b.errWrite()
}
func (emptyBackend) List(context.Context, claimstore.Loc) ([]uint64, []string, error) {
	return nil, nil, nil
}
func (emptyBackend) Locs(context.Context, claimstore.Kind) ([]claimstore.Loc, error) { return nil, nil }
func (b emptyBackend) WriteProof(context.Context, string, []byte) error              { return b.errWrite() }
func (emptyBackend) ReadProof(context.Context, string) ([]byte, error)               { return nil, fs.ErrNotExist }
func (emptyBackend) Proofs(context.Context) ([]string, error)                        { return nil, nil }
func (emptyBackend) Sync(context.Context, claimstore.Loc, uint64) error              { return nil }
func (b emptyBackend) Prepare(context.Context, claimstore.Loc, uint64, []byte, func(claimstore.Barrier) error) (claimstore.Prepared, error) {
	return nil, b.errWrite()
}

// checkClaimRoot refuses, for the commands that walk a whole root (fsck,
// classify --all, list), a directory that is evidently not a claim root: it
// holds entries, and none of them is one a claim root holds
// (dirbackend.RootEntries). Walking
// /proc or /var/lib would report every entry as a stray file, hundreds of
// findings that bury the real mistake, a wrong --root. An empty directory
// is an empty root (nothing claimed yet); a root holding seat/ and strays is
// a claim root with findings, which fsck reports one by one.
func checkClaimRoot(rc rootChoice) error {
	if rc.Etcd {
		return nil // only the store's keys are ever listed under its prefix
	}
	// Never os.Open: a FIFO planted where the root belongs would block
	// the walk before any check could refuse it.
	f, err := safefile.OpenDir(rc.Path)
	if errors.Is(err, safefile.ErrWrongType) {
		return fmt.Errorf("claim root %s (from %s): %w; a claim root is a directory: pass the real one with --root (or %s)", rc.Path, rc.Source, err, envRoot)
	}
	if err != nil {
		return nil // the store's own checks say what is wrong
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var nr *dirbackend.NotClaimRootError
	if errors.As(dirbackend.NotClaimRoot(rc.Path, names), &nr) {
		return fmt.Errorf("%s (from %s) is not a claim root: it holds %s and none of %s, which are all a claim root holds; pass the claim root with --root (or %s)",
			rc.Path, rc.Source, nr.Shown(), dirbackend.RootEntriesWords(), envRoot)
	}
	return nil
}

// progress shows, on standard error and only when it is a terminal (a log
// or a pipe gets nothing extra), how far a walk is: done/total and a rate
// once the total is known (total > 0), else the count so far. It redraws at
// most every 100ms, and always at the end (done == total): a walk of 100,000
// keys must not spend its time writing to the terminal.
func (e *env) progress(what, noun string, done, total int) {
	if !isTerminal(e.stderr) {
		return
	}
	now := time.Now()
	if e.progressStart.IsZero() {
		e.progressStart = now
	}
	// A new phase ("keys read", then "keys judged") is shown at once.
	if e.progressShown && now.Sub(e.progressLast) < 100*time.Millisecond && done != total && noun == e.progressNoun {
		return
	}
	e.progressLast, e.progressNoun = now, noun
	fmt.Fprint(e.stderr, "\r\x1b[K"+progressLine(what, noun, done, total, now.Sub(e.progressStart)))
	e.progressShown = true
}

// progressLine is one progress line: "list: 1200/20000 keys read, 3400/s"
// (a rate only once the total is known and 0.2s have passed), or
// "list: 1200 keys read".
func progressLine(what, noun string, done, total int, elapsed time.Duration) string {
	if total <= 0 {
		return fmt.Sprintf("%s: %d %s", what, done, noun)
	}
	rate := ""
	if el := elapsed.Seconds(); el > 0.2 {
		rate = fmt.Sprintf(", %.0f/s", float64(done)/el)
	}
	return fmt.Sprintf("%s: %d/%d %s%s", what, done, total, noun, rate)
}

// progressDone clears the progress line.
func (e *env) progressDone() {
	if e.progressShown {
		fmt.Fprint(e.stderr, "\r\x1b[K")
		e.progressShown = false
	}
}
