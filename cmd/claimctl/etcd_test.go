package main

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
var etcdScripts = []string{"lifecycle", "refusals", "claimid", "reboot", "stepcut", "list", "race", "killed", "copy"}

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
