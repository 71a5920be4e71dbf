package claimstore

import (
	"os/exec"
	"strings"
	"testing"
)

// The core sits on the seam (claimstore/storage) and imports neither
// backend: a backend is chosen by the program that opens a store, and a
// program on a directory root links no etcd client.
func TestCoreImportsNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasSuffix(pkg, "/claimstore/dirbackend") || strings.HasSuffix(pkg, "/claimstore/etcdbackend") || strings.HasPrefix(pkg, "go.etcd.io/") {
			t.Errorf("the core imports %s", pkg)
		}
	}
}
