package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// Nothing planted where the store looks — a FIFO, a plain file or a socket
// in place of the root, a kind directory, a key directory, a revision,
// proofs/ or a proof — makes any command hang or spin: each returns, and
// the planted file is left as it was.
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
		what string // "fifo", "file" or "socket"
	}
	keyDir := func(root string, k claimstore.Key) string {
		return filepath.Join(root, string(k.Kind), k.Hash())
	}
	plants := []plant{
		{"root fifo", func(r string) string { return r }, "fifo"},
		{"root file", func(r string) string { return r }, "file"},
		{"root socket", func(r string) string { return r }, "socket"},
		{"seat/ fifo", func(r string) string { return filepath.Join(r, "seat") }, "fifo"},
		{"seat/ file", func(r string) string { return filepath.Join(r, "seat") }, "file"},
		{"session/ file", func(r string) string { return filepath.Join(r, "session") }, "file"},
		{"key dir fifo", func(r string) string { return keyDir(r, seat) }, "fifo"},
		{"key dir file", func(r string) string { return keyDir(r, session) }, "file"},
		{"revision fifo", func(r string) string { return filepath.Join(keyDir(r, seat), claimstore.RevisionName(2)) }, "fifo"},
		{"revision socket", func(r string) string { return filepath.Join(keyDir(r, session), claimstore.RevisionName(2)) }, "socket"},
		{"proofs/ fifo", func(r string) string { return filepath.Join(r, "proofs") }, "fifo"},
		{"proof fifo", func(r string) string { return filepath.Join(r, "proofs", "boot-000000000000000000000000.json") }, "fifo"},
	}
	commands := [][]string{
		{"list"},
		{"fsck"},
		{"classify", "--all", "--dry-run"},
		{"classify", "--all"},
		append([]string{"show"}, pair...),
		append([]string{"classify"}, pair...),
		{"log", "--seat", "s", "--project", "p", "--workspace", "/w"},
		{"log", "--session", "x"},
		append(append([]string{"wait"}, pair...), "--timeout", "500ms"),
		append(append([]string{"acquire"}, pair...), "--owner-pid", strconv.Itoa(os.Getpid())),
		{"copy", "--to", "DEST"},
	}
	for _, pl := range plants {
		t.Run(pl.name, func(t *testing.T) {
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
				args := append([]string{}, cmd...)
				for j := range args {
					if args[j] == "DEST" {
						args[j] = filepath.Join(dir, "copy"+string(rune('a'+i)))
					}
				}
				args = append(args, "--root", root)
				if cmd[0] == "copy" {
					args = append([]string{"copy", "--from", root}, args[1:len(args)-2]...)
				}
				code, _, stderr := runBounded(t, nil, args...)
				if pl.at(root) == root && code == exitOK {
					t.Errorf("claimctl %s with %s at the root: exit 0, want a refusal naming it", strings.Join(args, " "), pl.what)
				}
				if pl.at(root) == root && !strings.Contains(stderr, root) {
					t.Errorf("claimctl %s with %s at the root: stderr does not name it:\n%s", strings.Join(args, " "), pl.what, stderr)
				}
				after, err := os.Lstat(at)
				if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
					t.Fatalf("claimctl %s changed the planted %s at %s: %v, %v", strings.Join(args, " "), pl.what, at, after, err)
				}
			}
		})
	}
}
