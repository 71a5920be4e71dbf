package claimstore

import (
	"time"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
)

// TOpts are a test's options for a store on a root: the store's own and
// its backend's. The tests of this package (and, through this file, its
// external tests) open stores with OpenRoot, as a program opens one with
// dirbackend.Open and New.
type TOpts struct {
	// FS is the directory backend's filesystem (nil: the OS's, and the
	// root is checked as dirbackend.Open checks it).
	FS vfs.FS
	// Backend replaces the directory backend.
	Backend    Backend
	Host       hostid.Host
	Barrier    BarrierFunc
	Now        func() time.Time
	Retries    int
	Sequential bool
}

// OpenRoot opens a store on root: the directory backend on o.FS (or
// o.Backend), and the store with the rest of o.
func OpenRoot(root string, o *TOpts) (*Store, error) {
	if o == nil {
		o = &TOpts{}
	}
	be := o.Backend
	if be == nil {
		b, err := dirbackend.Open(root, &dirbackend.Options{FS: o.FS, Sequential: o.Sequential})
		if err != nil {
			return nil, err
		}
		be = b
	}
	return New(be, &Options{Host: o.Host, Barrier: o.Barrier, Now: o.Now, Retries: o.Retries, Sequential: o.Sequential})
}
