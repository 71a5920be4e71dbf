package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/internal/etcdtest"
	"github.com/claimstore/claimstore/internal/systemdtest"
)

// TestRunEtcdHandOver: the real claimctl program, on an etcd root, hands
// run to claimctl-etcd, which replaces it: the process the supervisor
// started is the one that runs the claim, so the exit status of the writer
// (a transient unit of a real user manager) comes back unchanged, and a
// SIGTERM sent to that pid stops the writer and releases the claim with
// its proof.
func TestRunEtcdHandOver(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "claimctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/claimctl").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/claimctl: %v\n%s", err, out)
	}
	mgr := systemdtest.Start(t)
	c := etcdtest.Start(t, 1)
	root := "etcd://" + c.Hosts()[0] + "/runhandover"
	dir := handOverDir(t, bin, true)
	work := t.TempDir()
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, "claimctl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH"), "CLAIMSTORE_ROOT=",
			"DBUS_SESSION_BUS_ADDRESS="+mgr.Address, "XDG_RUNTIME_DIR="+mgr.RuntimeDir)
		return cmd
	}
	exitOf := func(err error) int {
		var xe *exec.ExitError
		switch {
		case errors.As(err, &xe):
			return xe.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return 0
	}
	pair := func(session string) []string {
		return []string{"--root", root, "--seat", "s-" + session, "--project", "p", "--workspace", "/w", "--session", session, "--units", "user"}
	}

	// The writer's status comes back.
	cmd := command(append(append([]string{"run"}, pair("x")...), "--", "sh", "-c", "exit 7")...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if code := exitOf(cmd.Run()); code != 7 {
		t.Fatalf("run -- exit 7 through the hand-over: exit %d\n%s", code, errb.String())
	}

	// SIGTERM to the pid the supervisor started.
	up := filepath.Join(work, "up")
	cmd = command(append(append([]string{"run"}, pair("y")...), "--claim-id", "c0000000000000000000000f1", "--", "sh", "-c", "echo up > "+up+"; exec sleep 300")...)
	errb.Reset()
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// The writer runs before run publishes active: wait for both.
		lg, _ := command("log", "--root", root, "--session", "y").Output()
		if _, err := os.Stat(up); err == nil && strings.Contains(string(lg), " active ") {
			break
		}
		if ctx.Err() != nil {
			cmd.Process.Kill()
			t.Fatalf("the writer did not come up: %s", errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(cmd.Wait()); code != 143 {
		t.Errorf("run after SIGTERM through the hand-over: exit %d, want 143 (the writer's)\n%s", code, errb.String())
	}
	lg, err := command("log", "--root", root, "--session", "y").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lg), "stopped") || !strings.Contains(string(lg), "cohortProof:unit mosaic-chat-c0000000000000000000000f1") || !strings.Contains(string(lg), "status 143") {
		t.Errorf("the claim after SIGTERM through the hand-over:\n%s", lg)
	}
}
