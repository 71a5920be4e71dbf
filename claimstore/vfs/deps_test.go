package vfs

import (
	"os/exec"
	"strings"
	"testing"
)

// TestVFSImportsNothingOfTheStore: the filesystem seam sits below the store:
// it imports neither the core, nor the seam claimstore/storage, nor a
// backend, so that the filesystems tests wrap around it (crashfs, errorfs)
// cannot come to depend on what they test.
func TestVFSImportsNothingOfTheStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, store := range []string{"/claimstore/claimstore", "/claimstore/storage", "/claimstore/dirbackend", "/claimstore/etcdbackend"} {
			if strings.HasSuffix(pkg, store) {
				t.Errorf("vfs imports %s", pkg)
			}
		}
	}
}
