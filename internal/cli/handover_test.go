package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
	"github.com/claimstore/claimstore/internal/storetest"
)

// TestClaimctlLinksNoEtcdClient: the claimctl program links none of the
// etcd client, gRPC or protobuf (their package initialisation doubled its
// start-up); claimctl-etcd links the client.
func TestClaimctlLinksNoEtcdClient(t *testing.T) {
	deps := func(pkg string) string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return string(out)
	}
	for _, line := range strings.Fields(deps("github.com/claimstore/claimstore/cmd/claimctl")) {
		for _, heavy := range []string{"go.etcd.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "go.uber.org/zap", "/claimstore/etcdbackend"} {
			if strings.Contains(line, heavy) && !strings.HasSuffix(line, "/etcdbackend/rooturl") {
				t.Errorf("cmd/claimctl links %s", line)
			}
		}
	}
	if !strings.Contains(deps("github.com/claimstore/claimstore/cmd/claimctl-etcd"), "go.etcd.io/etcd/client/v3\n") {
		t.Error("cmd/claimctl-etcd does not link the etcd client")
	}
}

// handOverDir is a directory holding the real claimctl program, built
// from cmd/claimctl, and, when withEtcd, claimctl-etcd beside it: this
// test binary under that name (TestMain runs it as claimctl-etcd).
func handOverDir(t *testing.T, bin string, withEtcd bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Link(bin, filepath.Join(dir, "claimctl")); err != nil {
		t.Fatal(err)
	}
	if withEtcd {
		linkTestBinary(t, dir)
	}
	return dir
}

// linkTestBinary puts this test binary in dir as claimctl-etcd.
func linkTestBinary(t *testing.T, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, etcdProgram)); err != nil {
		t.Fatal(err)
	}
}

// TestHandOverToClaimctlEtcd runs the real claimctl program on an etcd
// root: it hands every command to claimctl-etcd — found beside it, else on
// $PATH, never itself — with its arguments, environment, standard streams
// and exit status unchanged. Without claimctl-etcd it fails naming what to
// install, and touches nothing; directory roots never need it.
func TestHandOverToClaimctlEtcd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "claimctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/claimctl").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/claimctl: %v\n%s", err, out)
	}
	c := etcdtest.Start(t, 1)
	root := "etcd://" + strings.Join(c.Hosts(), ",") + "/handover"
	noPath := t.TempDir()
	pair := []string{"--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
	claimctl := func(t *testing.T, dir, path string, args ...string) (int, string, string) {
		t.Helper()
		// A hand-over that looped (claimctl running itself) would never
		// end: bound it, so that it fails instead.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "claimctl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+path, "CLAIMSTORE_ROOT=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var xe *exec.ExitError
		switch {
		case errors.As(err, &xe):
			return xe.ExitCode(), stdout.String(), stderr.String()
		case err != nil:
			t.Fatal(err)
		}
		return 0, stdout.String(), stderr.String()
	}
	held := func(t *testing.T) *claimstore.Pair {
		t.Helper()
		be, err := etcdbackend.Open(context.Background(), root, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		s, err := storetest.Open(root, &storetest.Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		seat, err := claimstore.SeatKey("s", "p", "/w")
		if err != nil {
			t.Fatal(err)
		}
		session, err := claimstore.SessionKey("x")
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Pair(context.Background(), seat, session)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("missing", func(t *testing.T) {
		dir := handOverDir(t, bin, false)
		code, out, errs := claimctl(t, dir, noPath, append([]string{"acquire", "--owner-pid", "parent", "--root", root}, pair...)...)
		if code != int(exitError) || out != "" || !strings.Contains(errs, "claimctl-etcd") || !strings.Contains(errs, "go install") || !strings.Contains(errs, dir) {
			t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 naming claimctl-etcd, where it was looked for and how to install it", code, out, errs)
		}
		if p := held(t); p.Held() {
			t.Errorf("the pair is held after a refused hand-over: %+v", p)
		}
		// A directory root needs no claimctl-etcd.
		code, _, errs = claimctl(t, dir, noPath, append([]string{"acquire", "--owner-pid", "parent", "--root", filepath.Join(t.TempDir(), "r")}, pair...)...)
		if code != 0 {
			t.Errorf("acquire on a directory root without claimctl-etcd: exit %d, %s", code, errs)
		}
	})

	t.Run("itself", func(t *testing.T) {
		// claimctl-etcd beside claimctl is claimctl itself: no loop.
		dir := handOverDir(t, bin, false)
		if err := os.Symlink(filepath.Join(dir, "claimctl"), filepath.Join(dir, etcdProgram)); err != nil {
			t.Fatal(err)
		}
		code, _, errs := claimctl(t, dir, dir, append([]string{"show", "--root", root}, pair...)...)
		if code != int(exitError) || !strings.Contains(errs, "neither next to this program") {
			t.Errorf("exit %d, stderr %q; want exit 1: claimctl-etcd is claimctl itself", code, errs)
		}
	})

	var id string
	t.Run("beside", func(t *testing.T) {
		dir := handOverDir(t, bin, true)
		code, out, errs := claimctl(t, dir, noPath, append([]string{"acquire", "--owner-pid", "parent", "--root", root, "--json"}, pair...)...)
		if code != 0 {
			t.Fatalf("acquire: exit %d\n%s%s", code, out, errs)
		}
		var got struct {
			ClaimID string `json:"claimId"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.ClaimID == "" {
			t.Fatalf("acquire --json printed %q (%v)", out, err)
		}
		id = got.ClaimID
		if p := held(t); p.Seat.Record == nil || p.Seat.Record.ClaimID != id || p.Session.Record == nil || p.Session.Record.ClaimID != id {
			t.Errorf("after the handed-over acquire, the pair is %+v; want both keys held by %s", p, id)
		}
		// A refusal's exit status comes back unchanged, flags before the
		// command too.
		code, _, errs = claimctl(t, dir, noPath, append([]string{"--root", root, "acquire", "--owner-pid", "parent"}, pair...)...)
		if code != int(exitAlreadyActive) || !strings.Contains(errs, "already-active") {
			t.Errorf("second acquire: exit %d, %s; want %d already-active", code, errs, exitAlreadyActive)
		}
	})

	t.Run("path", func(t *testing.T) {
		dir := handOverDir(t, bin, false)
		pathDir := t.TempDir()
		linkTestBinary(t, pathDir)
		t.Setenv(envRoot, "")
		code, out, errs := claimctl(t, dir, pathDir, append([]string{"show", "--json", "--root", root}, pair...)...)
		if code != 0 || !strings.Contains(out, id) {
			t.Errorf("show through claimctl-etcd on $PATH: exit %d\n%s%s; want the claim %s", code, out, errs, id)
		}
	})
}

// TestHandOverGuards: a hand-over is never attempted by a run that does not
// own its process (the tests', run in-process), nor once the command wrote
// to standard output: claimctl-etcd would run the command again from the
// start.
func TestHandOverGuards(t *testing.T) {
	// Were a guard missing, no claimctl-etcd is found to replace the test
	// process with: beside the test binary there is none, and PATH is empty.
	t.Setenv("PATH", t.TempDir())
	for _, c := range []struct {
		name     string
		delegate bool
		wrote    bool
		want     string
	}{
		{"not the process's own", false, false, "built without the etcd client"},
		{"after output", true, true, "after writing output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &env{stdout: &outWriter{w: io.Discard, wrote: c.wrote}, delegate: c.delegate, args: []string{"show"}}
			if err := e.handOver(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("handOver: %v; want an error saying %q", err, c.want)
			}
		})
	}
}
