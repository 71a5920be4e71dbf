package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// runEtcd runs a claimctl command line in this process with opts, stdin
// and the environment env, and returns its exit code and output.
func runEtcd(t *testing.T, opts *Options, stdin *os.File, env map[string]string, args ...string) (exitCode, string, string) {
	t.Helper()
	var out, errb strings.Builder
	getenv := func(k string) string { return env[k] }
	var in io.Reader = strings.NewReader("")
	if stdin != nil {
		in = stdin
	}
	code := run(opts, args, in, &out, &errb, getenv, false)
	return code, out.String(), errb.String()
}

// fillingBackend fills its cluster's space quota just before a session
// key's revision is published, once armed: a step is then cut between its
// keys by a real NOSPACE refusal.
type fillingBackend struct {
	claimstore.Backend
	armed atomic.Bool
	fill  func()
}

func (f *fillingBackend) before(loc storage.Loc) {
	if loc.Kind == storage.KindSession && f.armed.CompareAndSwap(true, false) {
		f.fill()
	}
}

func (f *fillingBackend) Publish(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) error {
	f.before(loc)
	return f.Backend.Publish(ctx, loc, n, data, hook)
}

// Prepare defers the filling to the commit: the store prepares a step's
// session revision while it publishes the seat's.
func (f *fillingBackend) Prepare(ctx context.Context, loc storage.Loc, n uint64, data []byte, hook func(storage.Barrier) error) (storage.Prepared, error) {
	p, err := f.Backend.Prepare(ctx, loc, n, data, hook)
	if err != nil {
		return nil, err
	}
	return &fillingPrepared{Prepared: p, f: f, loc: loc}, nil
}

type fillingPrepared struct {
	storage.Prepared
	f   *fillingBackend
	loc storage.Loc
}

func (p *fillingPrepared) Commit(ctx context.Context) error {
	p.f.before(p.loc)
	return p.Prepared.Commit(ctx)
}

// TestEtcdNoSpace: on a cluster out of space, a write fails at once
// (not after the resolve timeout) saying what to do, and reads go on; a
// step cut between its keys by NOSPACE says what was and was not published
// and the command that finishes it, which works once space is freed.
func TestEtcdNoSpace(t *testing.T) {
	c := etcdtest.StartQuota(t, 4<<20)
	root := "etcd://" + c.Hosts()[0] + "/claims"
	fb := &fillingBackend{fill: func() { c.Fill(t) }}
	opts := &Options{OpenEtcd: func(ctx context.Context, r string, conn EtcdConn) (claimstore.Backend, error) {
		be, err := testOptions.OpenEtcd(ctx, r, conn)
		fb.Backend = be
		return fb, err
	}}
	pair := []string{"--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
	args := func(a ...string) []string { return append(append(a, "--root", root), pair...) }
	if code, out, errs := runEtcd(t, opts, nil, nil, args("acquire", "--owner-pid", "parent", "--claim-id", "c0000000000000000000000a1")...); code != exitOK {
		t.Fatalf("acquire: exit %d\n%s%s", code, out, errs)
	}
	fb.armed.Store(true)
	start := time.Now()
	code, out, errs := runEtcd(t, opts, nil, nil, args("advance", "--claim", "c0000000000000000000000a1", "--state", "active", "--command-timeout", "3s", "--json")...)
	t.Logf("the cut step failed after %v", time.Since(start))
	if code != exitError {
		t.Fatalf("advance on a cluster that fills up: exit %d\n%s%s", code, out, errs)
	}
	for _, w := range []string{"was cut between its keys", "out of space", "NOT published session r2", "published seat r2", "etcdctl alarm disarm", "etcdctl defrag"} {
		if !strings.Contains(errs, w) {
			t.Errorf("the cut step's message does not say %q:\n%s", w, errs)
		}
	}
	var body struct {
		Error struct {
			Finish string `json:"finish"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &body); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	finish := body.Error.Finish
	if !strings.Contains(finish, "--command-timeout 3s") || !strings.Contains(finish, "--seat-rev 2 --session-rev 1") {
		t.Errorf("finish command %q does not name the connection flags and the revisions", finish)
	}

	code, out, errs = runEtcd(t, opts, nil, nil, "acquire", "--root", root, "--seat", "t", "--project", "p", "--workspace", "/w", "--session", "y", "--owner-pid", "parent")
	if code != exitError || !strings.Contains(errs, "out of space") || !strings.Contains(errs, "claimctl prune") || strings.Contains(errs, "indeterminate") {
		t.Errorf("acquire on a full cluster: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runEtcd(t, opts, nil, nil, args("show")...); code != exitOK || !strings.Contains(out, "active") {
		t.Errorf("show on a full cluster: exit %d\n%s%s", code, out, errs)
	}

	c.Free(t)
	fargs := shellSplit(t, finish)
	if code, out, errs := runEtcd(t, opts, nil, nil, fargs[1:]...); code != exitOK || !strings.Contains(out, "session") {
		t.Fatalf("the finish command %q: exit %d\n%s%s", finish, code, out, errs)
	}
	code, out, errs = runEtcd(t, opts, nil, nil, args("show", "--json")...)
	if code != exitOK || !strings.Contains(out, `"seatRev":2`) && !strings.Contains(out, `"revision":2`) {
		t.Errorf("show after the finish: exit %d\n%s%s", code, out, errs)
	}
}

// shellSplit splits a command line as shellQuote writes it (words, and
// single-quoted words).
func shellSplit(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			inQuote, have = !inQuote, true
		case r == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	if inQuote {
		t.Fatalf("unbalanced quote in %q", s)
	}
	return out
}

// TestEtcdAccessControl: --user NAME:PASSWORD, --user NAME --password,
// the password from the environment or typed on a terminal without echo;
// a read-only role shows and is refused writes at once with words that
// say what role it needs; a wrong password fails naming the user; no
// password is ever shown.
func TestEtcdAccessControl(t *testing.T) {
	c := etcdtest.Start(t, 1)
	root := "etcd://" + c.Hosts()[0] + "/claims"
	pair := []string{"--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
	u := etcdtest.EnableAuth(t, c, "/claims")
	secrets := []string{u.Writer.Password, u.Reader.Password, "wrong-secret"}
	check := func(what string, code, want exitCode, out, errs string, words ...string) {
		t.Helper()
		if code != want {
			t.Errorf("%s: exit %d, want %d\n%s%s", what, code, want, out, errs)
		}
		for _, w := range words {
			if !strings.Contains(out+errs, w) {
				t.Errorf("%s: does not say %q:\n%s%s", what, w, out, errs)
			}
		}
		for _, s := range secrets {
			if strings.Contains(out+errs, s) {
				t.Errorf("%s: the output shows a password:\n%s%s", what, out, errs)
			}
		}
	}
	code, out, errs := runEtcd(t, testOptions, nil, nil, append([]string{"acquire", "--user", u.Writer.Name + ":" + u.Writer.Password, "--owner-pid", "parent", "--claim-id", "c0000000000000000000000a1"}, pair...)...)
	check("acquire as the writer", code, exitOK, out, errs, "acquired")
	code, out, errs = runEtcd(t, testOptions, nil, map[string]string{envPassword: u.Reader.Password}, append([]string{"show", "--user", u.Reader.Name}, pair...)...)
	check("show as the reader, password from the environment", code, exitOK, out, errs, "reserved")
	start := time.Now()
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"advance", "--user", u.Reader.Name, "--password", u.Reader.Password, "--claim", "c0000000000000000000000a1", "--state", "active"}, pair...)...)
	t.Logf("a refused write failed after %v", time.Since(start))
	check("advance as the reader", code, exitError, out, errs, "user auditor may not write under /claims/", "readwrite")
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"show", "--user", u.Stranger.Name + ":" + u.Stranger.Password}, pair...)...)
	check("show as a user with no role", code, exitError, out, errs, "user stranger may not read /claims/")
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"show", "--user", u.Writer.Name + ":wrong-secret"}, pair...)...)
	check("show with a wrong password", code, exitError, out, errs, "authenticating as user supervisor failed: wrong user name or password")
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"show"}, pair...)...)
	check("show without a user", code, exitError, out, errs, "no user was given")
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"show", "--user", u.Reader.Name}, pair...)...)
	check("--user without a password, no terminal", code, exitUsage, out, errs, "has no password and standard input is not a terminal", envPassword)
	code, out, errs = runEtcd(t, testOptions, nil, nil, append([]string{"show", "--password", "x"}, pair...)...)
	check("--password without --user", code, exitUsage, out, errs, "--password without --user")

	// Typed on a terminal: the prompt names the user, and the terminal
	// does not echo what was typed.
	master, slave := openPTY(t)
	typed := make(chan error, 1)
	go func() {
		// Type once the echo is off, as a person types after the prompt.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err == nil && tio.Lflag&unix.ECHO == 0 {
				_, err := master.Write([]byte(u.Reader.Password + "\n"))
				typed <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		typed <- fmt.Errorf("the echo was never turned off")
	}()
	code, out, errs = runEtcd(t, testOptions, slave, nil, append([]string{"show", "--user", u.Reader.Name}, pair...)...)
	check("show with the password typed", code, exitOK, out, errs, "Password for etcd user auditor: ", "reserved")
	if err := <-typed; err != nil {
		t.Fatal(err)
	}
	master.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var echoed [256]byte
	n, _ := master.Read(echoed[:])
	if strings.Contains(string(echoed[:n]), u.Reader.Password) {
		t.Errorf("the terminal echoed the password: %q", echoed[:n])
	}
	if tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("the terminal's echo was not restored (%v)", err)
	}
}

// openPTY opens a pseudo-terminal: the master (non-blocking, so reads
// take deadlines) and its slave, closed in t.Cleanup.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	master = os.NewFile(uintptr(fd), "ptmx")
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close(); master.Close() })
	return master, slave
}

// TestEtcdQuorumLost: with two of three members stopped, a read and a
// write fail (exit 1) naming every member and what it answered; nothing is
// decided.
func TestEtcdQuorumLost(t *testing.T) {
	c := etcdtest.Start(t, 3)
	root := "etcd://" + strings.Join(c.Hosts(), ",") + "/claims"
	pair := []string{"--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--command-timeout", "1s"}
	if code, out, errs := runEtcd(t, testOptions, nil, nil, append([]string{"acquire", "--owner-pid", "parent", "--claim-id", "c0000000000000000000000a1"}, pair...)...); code != exitOK {
		t.Fatalf("acquire: exit %d\n%s%s", code, out, errs)
	}
	c.Kill(0)
	c.Kill(1)
	c.WaitNoLeader(2)
	for _, cmd := range [][]string{{"show"}, {"advance", "--claim", "c0000000000000000000000a1", "--state", "active"}} {
		start := time.Now()
		code, out, errs := runEtcd(t, testOptions, nil, nil, append(cmd, pair...)...)
		t.Logf("%s without a quorum failed after %v", cmd[0], time.Since(start))
		if code != exitError {
			t.Errorf("%s without a quorum: exit %d\n%s%s", cmd[0], code, out, errs)
		}
		for _, w := range []string{c.Hosts()[0] + ": unreachable", c.Hosts()[1] + ": unreachable", c.Hosts()[2] + ": up, no leader", "a quorum"} {
			if !strings.Contains(errs, w) {
				t.Errorf("%s without a quorum does not say %q:\n%s", cmd[0], w, errs)
			}
		}
	}
}

// TestEtcdPruneCollectsFences: prune on an etcd root collects the fence
// keys of lost replies and says so, in words and in its JSON; a dry run
// counts them and collects nothing; an older claimstore's fence is kept,
// counted, with why.
func TestEtcdPruneCollectsFences(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	ctx := context.Background()
	root := "etcd://" + c.Hosts()[0] + "/claims"
	ours, old := "/claims/fences/e0000000000000000000/0123456789abcdef01234567", "/claims/fences/89abcdef0123456789abcdef"
	for _, k := range []string{ours, old} {
		if _, err := cli.Put(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
	}
	has := func(k string) bool {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) > 0
	}
	code, out, errs := runEtcd(t, testOptions, nil, nil, "prune", "--root", root, "--no-archive", "--dry-run")
	t.Logf("prune --dry-run:\n%s", out)
	if code != exitOK || !strings.Contains(out, "fences that would be collected: 1\n") || !strings.Contains(out, "fences kept: 1: ") || !has(ours) {
		t.Fatalf("prune --dry-run: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runEtcd(t, testOptions, nil, nil, "prune", "--root", root, "--no-archive", "--json")
	if code != exitOK {
		t.Fatalf("prune: exit %d\n%s%s", code, out, errs)
	}
	var j pruneJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if j.FencesCollected != 1 || j.FencesKept != 1 || !strings.Contains(j.FencesKeptWhy, "older claimstore") {
		t.Errorf("prune --json: fencesCollected %d, fencesKept %d, fencesKeptWhy %q; want 1, 1 and why", j.FencesCollected, j.FencesKept, j.FencesKeptWhy)
	}
	if has(ours) || !has(old) {
		t.Errorf("after prune: our fence there %v (want gone), the older claimstore's there %v (want kept)", has(ours), has(old))
	}
	if _, err := cli.Put(ctx, "/claims/fences/e"+strings.Repeat("0", 19)+"/x", ""); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runEtcd(t, testOptions, nil, nil, "prune", "--root", root, "--no-archive")
	if code != exitOK || !strings.Contains(out, "fences collected: 1\n") {
		t.Errorf("prune: exit %d\n%s%s", code, out, errs)
	}
}
