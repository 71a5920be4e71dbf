package storetest

import (
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid"
)

// Options are a store's options and its directory backend's.
type Options struct {
	// FS is the directory backend's filesystem (nil: the OS's, and the
	// root is checked as dirbackend.Open checks it).
	FS vfs.FS
	// Backend replaces the directory backend.
	Backend    claimstore.Backend
	Host       hostid.Host
	Barrier    claimstore.BarrierFunc
	Now        func() time.Time
	Retries    int
	Sequential bool
}

// Open opens a store on root: the directory backend on o.FS (or
// o.Backend), and the store with the rest of o. A nil o is all defaults.
func Open(root string, o *Options) (*claimstore.Store, error) {
	if o == nil {
		o = &Options{}
	}
	be := o.Backend
	if be == nil {
		b, err := dirbackend.Open(root, &dirbackend.Options{FS: o.FS, Sequential: o.Sequential})
		if err != nil {
			return nil, err
		}
		be = b
	}
	return claimstore.New(be, &claimstore.Options{Host: o.Host, Barrier: o.Barrier, Now: o.Now, Retries: o.Retries, Sequential: o.Sequential})
}
