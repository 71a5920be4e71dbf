package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
)

// runBounded runs claimctl in-process and fails the test if it has not
// returned within the bound: a command that blocks on what it finds on
// disk (a FIFO opened for reading waits for a writer forever) is a hang for
// every operator who meets it.
func runBounded(t *testing.T, env map[string]string, args ...string) (exitCode, string, string) {
	t.Helper()
	type result struct {
		code           exitCode
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run(testOptions, args, nil, &stdout, &stderr, func(k string) string { return env[k] }, false)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(20 * time.Second):
		t.Fatalf("claimctl %s did not return within 20s: it blocks on what it found", strings.Join(args, " "))
	}
	return 0, "", ""
}

// followBounded runs claimctl log --follow as a real process (this test
// binary under the name claimctl, which testscript.Main puts on $PATH) and
// reports whether it ended by itself or followed: once it catches its stop
// signals (the envTestSignalsArmed hook) and has printed the history, it
// is following, and SIGTERM must then end it promptly with exit 0. No
// guessed sleep: a slow start (a -race build on a loaded machine) is not
// taken for a follow, nor signalled before it catches the signal.
func followBounded(t *testing.T, args ...string) (code int, followed bool, stdout, stderr string) {
	t.Helper()
	armed := filepath.Join(t.TempDir(), "armed")
	var out, errb lockedBuffer
	cmd := exec.Command("claimctl", args...)
	cmd.Env = append(os.Environ(), envTestSignalsArmed+"="+armed)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-deadline:
			cmd.Process.Kill()
			<-done
			t.Fatalf("claimctl %s neither ended nor printed its history within 20s", strings.Join(args, " "))
		case <-time.After(20 * time.Millisecond):
		}
		if _, serr := os.Stat(armed); serr != nil || out.Len() == 0 {
			continue
		}
		followed = true
		if kerr := cmd.Process.Signal(syscall.SIGTERM); kerr != nil {
			t.Fatal(kerr)
		}
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("claimctl %s did not end within 20s of SIGTERM", strings.Join(args, " "))
		}
		break
	}
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe):
		code = xe.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, followed, out.String(), errb.String()
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Nothing planted where the store looks — a FIFO, a plain file, a socket or
// a device node in place of the root, a kind directory, a key directory, a
// revision, proofs/ or a proof — makes any command hang or spin: each
// returns with the exit code that says what it met, names the planted path
// where it met it, and leaves the planted file as it was.
func TestNothingBlocksOnPlantedFiles(t *testing.T) {
	seat, _ := claimstore.SeatKey("s", "p", "/w")
	session, _ := claimstore.SessionKey("x")
	pair := []string{"--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
	type plant struct {
		name string
		// at returns the path to plant at in a root holding one claim
		// released on a boot proof-less cohort proof (so every kind of
		// directory and file exists).
		at   func(root string) string
		what string // "fifo", "file", "socket" or "device"
		// where is what the plant stands in for: "root", "kind" (seat/ or
		// session/), "keydir", "revision", "proofs" or "proof"; key is
		// the kind of key whose path it is in ("seat", "session" or "").
		where, key string
	}
	keyDir := func(root string, k claimstore.Key) string {
		return filepath.Join(root, string(k.Kind), k.Hash())
	}
	root := func(r string) string { return r }
	seatDir := func(r string) string { return filepath.Join(r, "seat") }
	seatKeyDir := func(r string) string { return keyDir(r, seat) }
	seatRev := func(r string) string { return filepath.Join(keyDir(r, seat), claimstore.RevisionName(2)) }
	sessionRev := func(r string) string { return filepath.Join(keyDir(r, session), claimstore.RevisionName(2)) }
	proofs := func(r string) string { return filepath.Join(r, "proofs") }
	proof := func(r string) string { return filepath.Join(r, "proofs", "boot-000000000000000000000000.json") }
	plants := []plant{
		{"root fifo", root, "fifo", "root", ""},
		{"root file", root, "file", "root", ""},
		{"root socket", root, "socket", "root", ""},
		{"root device", root, "device", "root", ""},
		{"seat/ fifo", seatDir, "fifo", "kind", "seat"},
		{"seat/ file", seatDir, "file", "kind", "seat"},
		{"seat/ device", seatDir, "device", "kind", "seat"},
		{"session/ file", func(r string) string { return filepath.Join(r, "session") }, "file", "kind", "session"},
		{"key dir fifo", seatKeyDir, "fifo", "keydir", "seat"},
		{"key dir device", seatKeyDir, "device", "keydir", "seat"},
		{"key dir file", func(r string) string { return keyDir(r, session) }, "file", "keydir", "session"},
		{"revision fifo", seatRev, "fifo", "revision", "seat"},
		{"revision socket", sessionRev, "socket", "revision", "session"},
		{"revision device", sessionRev, "device", "revision", "session"},
		{"proofs/ fifo", proofs, "fifo", "proofs", ""},
		{"proof fifo", proof, "fifo", "proof", ""},
		{"proof device", proof, "device", "proof", ""},
	}
	type command struct {
		args []string
		// key is the one key the command reads ("seat" or "session"), or
		// "" for the pair or the whole root.
		key string
	}
	commands := []command{
		{[]string{"list"}, ""},
		{[]string{"fsck"}, ""},
		{[]string{"classify", "--all", "--dry-run"}, ""},
		{[]string{"classify", "--all"}, ""},
		{append([]string{"show"}, pair...), ""},
		{append([]string{"classify"}, pair...), ""},
		{[]string{"log", "--seat", "s", "--project", "p", "--workspace", "/w"}, "seat"},
		{[]string{"log", "--session", "x"}, "session"},
		{append(append([]string{"wait"}, pair...), "--timeout", "500ms"), ""},
		{append(append([]string{"acquire"}, pair...), "--owner-pid", strconv.Itoa(os.Getpid())), ""},
		{[]string{"copy", "--to", "DEST"}, ""},
		{[]string{"log", "--follow", "--seat", "s", "--project", "p", "--workspace", "/w"}, "seat"},
		{[]string{"log", "--follow", "--session", "x"}, "session"},
	}
	// expect is what a command does with a plant below the root: its exit
	// code, whether the planted path must appear in its output (else
	// names, if not empty, must), and for log --follow whether it follows
	// (ends only on SIGTERM) rather than ending by itself.
	expect := func(pl plant, c command) (code int, namesAt bool, names string, follows bool) {
		name := c.args[0]
		if name == "classify" && c.args[1] == "--all" {
			name = "classify --all"
		}
		if name == "log" && c.args[1] == "--follow" {
			name = "follow"
		}
		// A command that reads one key meets only a plant in that key's
		// path.
		meets := c.key == "" || pl.key == "" || c.key == pl.key
		switch {
		case pl.where == "kind" || pl.where == "keydir":
			if !meets {
				return 0, false, "", name == "follow"
			}
			switch name {
			case "fsck":
				return 7, true, "", false
			case "list":
				if pl.where == "keydir" {
					// Listed as a damaged key, held.
					return 0, true, "", false
				}
			}
			return 1, true, "", false
		case pl.where == "revision":
			if !meets {
				return 0, false, "", name == "follow"
			}
			switch name {
			case "fsck":
				return 7, true, "", false
			case "classify", "classify --all":
				// Left uncertain: held, on the damaged head it names.
				return 6, false, "has a damaged head revision 2", false
			case "wait":
				// A damaged head is held: wait times out.
				return 8, false, "is still held", false
			case "acquire":
				return 4, true, "", false
			case "copy":
				return 1, true, "", false
			case "follow":
				return 0, true, "", true
			}
			return 0, true, "", false
		case pl.where == "proofs" || pl.where == "proof":
			switch {
			case name == "fsck":
				return 7, true, "", false
			case name == "copy", name == "acquire" && pl.where == "proofs":
				// acquire reads proofs/ for a decommission record.
				return 1, true, "", false
			}
			return 0, false, "", name == "follow"
		}
		t.Fatalf("no expectation for %s", pl.where)
		return
	}
	for _, pl := range plants {
		t.Run(pl.name, func(t *testing.T) {
			if pl.what == "device" && os.Geteuid() != 0 {
				// mknod of a device node needs CAP_MKNOD.
				if os.Getenv("CI") == "true" {
					t.Fatal("a device node can be planted only as root, and CI runs this test as root: run it as root")
				}
				t.Skip("a device node can be planted only as root (CAP_MKNOD); this run is not root")
			}
			dir := t.TempDir()
			root := filepath.Join(dir, "root")
			s, err := storetest.Open(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			owner, err := s.Self(nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: owner})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "proofs"), 0o700); err != nil {
				t.Fatal(err)
			}
			at := pl.at(root)
			// Make the place writable long enough to plant (revisions are
			// 0400 in 0700 directories; the root is ours).
			_ = os.Chmod(filepath.Dir(at), 0o700)
			if err := os.RemoveAll(at); err != nil {
				t.Fatal(err)
			}
			switch pl.what {
			case "fifo":
				if err := syscall.Mkfifo(at, 0o600); err != nil {
					t.Fatal(err)
				}
			case "device":
				// /dev/null's numbers: a character device, whatever the
				// mount lets one open.
				if err := syscall.Mknod(at, syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
					t.Fatal(err)
				}
			case "file":
				if err := os.WriteFile(at, []byte("planted\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			case "socket":
				fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
				if err != nil {
					t.Fatal(err)
				}
				// A socket's path is bounded (108 bytes): bind it by its
				// name from its directory.
				wd, _ := os.Getwd()
				if err := os.Chdir(filepath.Dir(at)); err != nil {
					t.Fatal(err)
				}
				err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Base(at)})
				if cerr := os.Chdir(wd); cerr != nil {
					t.Fatal(cerr)
				}
				if err != nil {
					t.Fatal(err)
				}
				syscall.Close(fd)
			}
			before, err := os.Lstat(at)
			if err != nil {
				t.Fatal(err)
			}
			for i, cmd := range commands {
				args := append([]string{}, cmd.args...)
				for j := range args {
					if args[j] == "DEST" {
						args[j] = filepath.Join(dir, "copy"+string(rune('a'+i)))
					}
				}
				args = append(args, "--root", root)
				if args[0] == "copy" {
					args = append([]string{"copy", "--from", root}, args[1:len(args)-2]...)
				}
				line := "claimctl " + strings.Join(args, " ")
				var (
					code           int
					followed       bool
					stdout, stderr string
				)
				if args[0] == "log" && args[1] == "--follow" {
					code, followed, stdout, stderr = followBounded(t, args...)
				} else {
					var x exitCode
					x, stdout, stderr = runBounded(t, nil, args...)
					code = int(x)
				}
				if pl.where == "root" {
					if code == int(exitOK) {
						t.Errorf("%s with %s at the root: exit 0, want a refusal naming it", line, pl.what)
					}
					if followed {
						t.Errorf("%s with %s at the root: followed until SIGTERM, want it refused at once", line, pl.what)
					}
					if !strings.Contains(stderr, root) {
						t.Errorf("%s with %s at the root: stderr does not name it:\n%s", line, pl.what, stderr)
					}
				} else {
					wantCode, namesAt, names, follows := expect(pl, cmd)
					out := stdout + stderr
					if code != wantCode {
						t.Errorf("%s with %s at %s: exit %d, want %d\n%s", line, pl.what, at, code, wantCode, out)
					}
					if namesAt && !strings.Contains(out, at) {
						t.Errorf("%s with %s at %s: its output does not name the path:\n%s", line, pl.what, at, out)
					}
					if names != "" && !strings.Contains(out, names) {
						t.Errorf("%s with %s at %s: its output does not say %q:\n%s", line, pl.what, at, names, out)
					}
					if followed != follows {
						t.Errorf("%s with %s at %s: followed until SIGTERM %v, want %v\n%s", line, pl.what, at, followed, follows, out)
					}
				}
				after, err := os.Lstat(at)
				if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
					t.Fatalf("%s changed the planted %s at %s: %v, %v", line, pl.what, at, after, err)
				}
			}
		})
	}
}
