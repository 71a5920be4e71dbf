package dirbackend

import (
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/hostid"
)

// newRoot returns a claim root that does not exist yet, in a fresh
// temporary directory: the backend creates it on first write.
func newRoot(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "claims")
}

// testHost presents a fixed machine id and boot id over the real host (so
// process identities are real).
var testHost = hostid.Override{Host: hostid.System, Machine: "0123456789abcdef0123456789abcdef", Boot: "11111111-2222-3333-4444-555555555555"}

// openStore returns a store on the backend, with the test host.
func openStore(t testing.TB, be *Backend) *claimstore.Store {
	t.Helper()
	s, err := claimstore.New(be, &claimstore.Options{Host: testHost})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
