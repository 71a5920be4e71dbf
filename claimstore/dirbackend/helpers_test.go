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
type testHost struct{ hostid.Host }

func (testHost) MachineID() (string, error) { return "0123456789abcdef0123456789abcdef", nil }
func (testHost) BootID() (string, error)    { return "11111111-2222-3333-4444-555555555555", nil }

// openStore returns a store on the backend, with the test host.
func openStore(t testing.TB, be *Backend) *claimstore.Store {
	t.Helper()
	s, err := claimstore.New(be, &claimstore.Options{Host: testHost{hostid.System}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
