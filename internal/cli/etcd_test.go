package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/claimstore/claimstore/internal/etcdtest"
)

// etcdScripts are the end-to-end scripts that run over an etcd root as
// well: the same files as TestScripts runs over a directory, whose few
// steps that look at files are marked [!etcd].
var etcdScripts = []string{"lifecycle", "refusals", "claimid", "reboot", "stepcut", "list", "race", "killed", "copy", "wait", "log", "waiters", "metrics", "decommission"}

// TestScriptsEtcd runs etcdScripts with $ROOT an etcd:// root on a real
// single-member etcd started for the test, each script under its own key
// prefix, and the condition [etcd] true.
func TestScriptsEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dir := t.TempDir()
	for _, name := range etcdScripts {
		data, err := os.ReadFile(filepath.Join("testdata", name+".txtar"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".txtar"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int64
	p := params(dir)
	setup := p.Setup
	p.Setup = func(e *testscript.Env) error {
		if err := setup(e); err != nil {
			return err
		}
		e.Setenv("ROOT", fmt.Sprintf("etcd://%s/script%d", strings.Join(c.Hosts(), ","), n.Add(1)))
		return nil
	}
	p.Condition = func(cond string) (bool, error) {
		if cond == "etcd" {
			return true, nil
		}
		return false, fmt.Errorf("unknown condition %q", cond)
	}
	testscript.Run(t, p)
}

// TestTLSFlags: --cacert, --cert and --key reach a member that serves
// clients over TLS only and requires a client certificate, after the
// command or before it; without them claimctl fails (exit 1) naming the
// endpoint.
func TestTLSFlags(t *testing.T) {
	c, f := etcdtest.StartTLS(t)
	root := "etcd://" + c.Hosts()[0] + "/tls"
	getenv := func(string) string { return "" }
	runIt := func(args ...string) (exitCode, string, string) {
		var out, errb strings.Builder
		code := run(testOptions, args, strings.NewReader(""), &out, &errb, getenv, false)
		return code, out.String(), errb.String()
	}
	tlsArgs := []string{"--cacert", f.CACert, "--cert", f.ClientCert, "--key", f.ClientKey}
	code, out, errs := runIt(append([]string{"acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--claim-id", "c0000000000000000000000a1", "--owner-pid", "parent"}, tlsArgs...)...)
	if code != exitOK || !strings.Contains(out, "acquired  claim c0000000000000000000000a1") {
		t.Fatalf("acquire over TLS: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runIt(append(append([]string{"--root", root}, tlsArgs...), "show", "--session", "x")...)
	if code != exitOK || !strings.Contains(out, "reserved") {
		t.Errorf("show over TLS, flags before the command: exit %d\n%s%s", code, out, errs)
	}
	code, _, errs = runIt("show", "--root", root, "--session", "x", "--dial-timeout", "1s")
	if code != exitError || !strings.Contains(errs, c.Hosts()[0]) {
		t.Errorf("show without TLS: exit %d, %s; want exit 1 naming the endpoint", code, errs)
	}
}
