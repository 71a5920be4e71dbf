package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
	"github.com/claimstore/claimstore/internal/systemdtest"
)

// main1 is claimctl as the test scripts run it: the real binary (the test
// binary, re-executed under the name claimctl), with the test-only host
// overrides enabled.
func main1() {
	testHooks = true
	os.Exit(int(run(testOptions, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, false)))
}

// testOptions are claimctl-etcd's: the tests run every command on both
// kinds of root in one binary (the hand-over from claimctl to claimctl-etcd
// has its own tests, handover_test.go).
var testOptions = &Options{OpenEtcd: func(ctx context.Context, root string, c EtcdConn) (claimstore.Backend, error) {
	return etcdbackend.Open(ctx, root, &etcdbackend.Config{CACert: c.CACert, Cert: c.Cert, Key: c.Key, User: c.User, Password: c.Password, DialTimeout: c.DialTimeout, RequestTimeout: c.CommandTimeout})
}}

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"claimctl": main1, etcdProgram: main1})
}

// scriptCmds are the commands the scripts have besides testscript's own.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	// exits N CMD ARGS...: run CMD and require exit status N; its stdout
	// and stderr are kept for the next stdout/stderr commands.
	"exits": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 2 {
			ts.Fatalf("usage: exits N command args...")
		}
		want, err := strconv.Atoi(args[0])
		ts.Check(err)
		err = ts.Exec(args[1], args[2:]...)
		got := 0
		var xe *exec.ExitError
		switch {
		case errors.As(err, &xe):
			got = xe.ExitCode()
		case err != nil:
			ts.Fatalf("%s: %v", args[1], err)
		}
		if got != want {
			ts.Fatalf("%s exited %d, want %d", args[1], got, want)
		}
	},
	// repeat VAR N TEXT: set VAR to TEXT repeated N times, for values too
	// large to write out in a script (an oversize --set).
	"repeat": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 3 {
			ts.Fatalf("usage: repeat VAR N TEXT")
		}
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		ts.Setenv(args[0], strings.Repeat(args[2], n))
	},
	// bgpid VAR: set VAR to the pid of the latest background command.
	"bgpid": func(ts *testscript.TestScript, neg bool, args []string) {
		cmds := ts.BackgroundCmds()
		if len(args) != 1 || len(cmds) == 0 {
			ts.Fatalf("usage: bgpid VAR (after a background command)")
		}
		ts.Setenv(args[0], strconv.Itoa(cmds[len(cmds)-1].Process.Pid))
	},
	// keyhash VAR seat S P W | keyhash VAR session ID: set VAR to the key's
	// directory name.
	"keyhash": func(ts *testscript.TestScript, neg bool, args []string) {
		var k claimstore.Key
		var err error
		switch {
		case len(args) == 5 && args[1] == "seat":
			k, err = claimstore.SeatKey(args[2], args[3], args[4])
		case len(args) == 3 && args[1] == "session":
			k, err = claimstore.SessionKey(args[2])
		default:
			ts.Fatalf("usage: keyhash VAR seat S P W | keyhash VAR session ID")
		}
		ts.Check(err)
		ts.Setenv(args[0], k.Hash())
	},
	// jsonvar VAR FIELD...: set VAR to a member of the JSON on the last
	// stdout (a path of member names; numbers index arrays).
	"jsonvar": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: jsonvar VAR field...")
		}
		var v any
		ts.Check(json.Unmarshal([]byte(ts.ReadFile("stdout")), &v))
		for _, f := range args[1:] {
			switch x := v.(type) {
			case map[string]any:
				v = x[f]
			case []any:
				i, err := strconv.Atoi(f)
				ts.Check(err)
				v = x[i]
			default:
				ts.Fatalf("jsonvar: %q: not an object or array", f)
			}
		}
		switch x := v.(type) {
		case string:
			ts.Setenv(args[0], x)
		default:
			b, _ := json.Marshal(x)
			ts.Setenv(args[0], string(b))
		}
	},
	// validutf8 FILE: FILE (stdout, stderr or a file) is valid UTF-8.
	"validutf8": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 1 {
			ts.Fatalf("usage: validutf8 stdout|stderr|FILE")
		}
		if ok := utf8.ValidString(ts.ReadFile(args[0])); ok == neg {
			ts.Fatalf("%s: valid UTF-8 is %v", args[0], ok)
		}
	},
	// waitmatch FILE REGEXP: wait (bounded) until FILE, written by a
	// background command, matches REGEXP (multi-line mode). A follower's
	// output is only in testscript's buffer once it exits; through a file,
	// a script can act on what it printed while it runs.
	"waitmatch": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: waitmatch FILE REGEXP")
		}
		re := regexp.MustCompile("(?m)" + args[1])
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, _ := os.ReadFile(ts.MkAbs(args[0]))
			if re.Match(data) {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("%s does not match %q after 10s; it holds:\n%s", args[0], args[1], data)
			}
			time.Sleep(20 * time.Millisecond)
		}
	},
	// sig NAME PID: send signal NAME (TERM, HUP, QUIT, INT, KILL, ...) to
	// process PID; testscript's own kill knows only INT and KILL.
	"sig": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: sig NAME PID")
		}
		num := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1}[args[0]]
		if num == 0 {
			ts.Fatalf("sig: unknown signal %q", args[0])
		}
		pid, err := strconv.Atoi(args[1])
		ts.Check(err)
		ts.Check(syscall.Kill(pid, num))
	},
	// waitgone PID: wait (bounded) until no process PID exists.
	"waitgone": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 1 {
			ts.Fatalf("usage: waitgone PID")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat("/proc/" + args[0]); err != nil {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("process %s still exists", args[0])
			}
			time.Sleep(20 * time.Millisecond)
		}
	},
}

func params(dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		Cmds:                scriptCmds,
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// Scripts name their root; make sure nothing leaks in.
			e.Setenv(envRoot, "")
			e.Setenv(envTestBootID, "")
			e.Setenv(envTestMachineID, "")
			e.Setenv(envTestMachineIDFile, "")
			e.Setenv(envTestFail, "")
			e.Setenv(envTestSignalsArmed, "")
			e.Setenv("ROOT", e.WorkDir+"/root")
			return nil
		},
		// [etcd] is true only in TestScriptsEtcd, where $ROOT is an
		// etcd:// root: steps that look at files are marked [!etcd].
		Condition: func(cond string) (bool, error) {
			if cond == "etcd" {
				return false, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	}
}

// TestScripts runs the end-to-end scenarios in testdata/*.txtar against
// the built binary.
func TestScripts(t *testing.T) {
	testscript.Run(t, params("testdata"))
}

// TestScriptsSystemd runs testdata/systemd/*.txtar with a real systemd
// user manager: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR reach it, and
// the command sdrun UNIT ARGS... starts a transient unit on it.
func TestScriptsSystemd(t *testing.T) {
	testScriptsSystemd(t, "testdata/systemd", nil)
}

// TestScriptsSystemdEtcd runs testdata/systemd/run.txtar with $ROOT an
// etcd:// root on a real member: claimctl run with the claim in etcd and
// the writer a transient unit of a real user manager (exit status, signals,
// SIGKILL of run then run --adopt, --wait and log --follow by etcd's watch).
func TestScriptsSystemdEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/systemd/run.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.txtar"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	testScriptsSystemd(t, dir, func(e *testscript.Env) {
		e.Setenv("ROOT", fmt.Sprintf("etcd://%s/sdscript%d", strings.Join(c.Hosts(), ","), n.Add(1)))
	})
}

func testScriptsSystemd(t *testing.T, dir string, more func(*testscript.Env)) {
	mgr := systemdtest.Start(t)
	p := params(dir)
	setup := p.Setup
	p.Setup = func(e *testscript.Env) error {
		if err := setup(e); err != nil {
			return err
		}
		if more != nil {
			more(e)
		}
		e.Setenv("DBUS_SESSION_BUS_ADDRESS", mgr.Address)
		e.Setenv("XDG_RUNTIME_DIR", mgr.RuntimeDir)
		// The unit files the project ships (dist/systemd), for boot.txtar.
		dist, err := filepath.Abs("../../dist/systemd")
		if err != nil {
			return err
		}
		e.Setenv("DIST", dist)
		return nil
	}
	cmds := map[string]func(*testscript.TestScript, bool, []string){}
	for k, v := range scriptCmds {
		cmds[k] = v
	}
	cmds["sdrun"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: sdrun UNIT command args...")
		}
		ts.Check(mgr.Run(args[0], args[1:]...))
	}
	cmds["systemctl"] = func(ts *testscript.TestScript, neg bool, args []string) {
		out, err := mgr.Systemctl(args...)
		ts.Logf("%s", out)
		if err != nil && !neg {
			ts.Fatalf("systemctl %s: %v", strings.Join(args, " "), err)
		}
	}
	p.Cmds = cmds
	testscript.Run(t, p)
}
