package claimstore

import (
	"errors"
	"sync"
	"time"

	"github.com/claimstore/claimstore/hostid"
)

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Host presents the machine: its machine id and boot id, and process
	// identities. Default: hostid.System.
	Host hostid.Host
	// Barrier, when set, is called at every barrier point.
	Barrier BarrierFunc
	// Now is the clock for writtenAt. Default: time.Now. The store never
	// decides anything by it.
	Now func() time.Time
	// Retries bounds how often an operation that lost a link race
	// re-reads and re-decides. Default: 4.
	Retries int
	// Sequential runs, one after the other in a fixed order, the work a
	// step otherwise overlaps (its session revision is prepared first,
	// then its seat revision published, then the session revision
	// committed), so that tests that stop a store after its k-th
	// filesystem call meet the same call at the same k every run. The
	// crash states are the same as the overlapped protocol's: only the
	// order of calls that make nothing durable differs. (The directory
	// backend has an option of the same name for its own fsyncs.)
	Sequential bool
}

// Store is a claim store on one root, in one backend. Its methods are safe
// for concurrent use by multiple goroutines; exclusion between writers, in
// this process or any other, comes from the backend's exclusive publish,
// not from locks.
type Store struct {
	mu     sync.Mutex
	listed map[Loc]uint64 // see head: keys a listing showed dense, and up to where
	// own remembers, per key, the last revision this store published: a
	// step fenced on it need not read it back (see fenced).
	own map[Loc]ownRev
	// machine is the machine id once read: a store never outlives it.
	machine string

	be         Backend
	host       hostid.Host
	barrier    BarrierFunc
	now        func() time.Time
	retries    int
	sequential bool
}

// New returns a store on the root be keeps: the directory backend
// (dirbackend.Open), the etcd backend (etcdbackend.Open), or any other that
// implements the seam. New touches nothing.
func New(be Backend, opts *Options) (*Store, error) {
	if be == nil {
		return nil, errors.New("claimstore: a backend is required (dirbackend.Open for a directory, etcdbackend.Open for etcd)")
	}
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{listed: map[Loc]uint64{}, be: be, host: opts.Host, barrier: opts.Barrier, now: opts.Now, retries: opts.Retries, sequential: opts.Sequential}
	if s.host == nil {
		s.host = hostid.System
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.retries <= 0 {
		s.retries = 4
	}
	return s, nil
}

type ownRev struct {
	n       uint64
	claimID string
}

// machineID returns this machine's id, read once per store.
func (s *Store) machineID() (string, error) {
	s.mu.Lock()
	m := s.machine
	s.mu.Unlock()
	if m != "" {
		return m, nil
	}
	m, err := s.host.MachineID()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.machine = m
	s.mu.Unlock()
	return m, nil
}

// Root returns the store's claim root, as its backend names it.
func (s *Store) Root() string { return s.be.Root() }

// Backend returns the store's backend.
func (s *Store) Backend() Backend { return s.be }

// Host returns the host the store judges owners and boots on.
func (s *Store) Host() hostid.Host { return s.host }

// KeyDir returns where k's history lives under the root.
func (s *Store) KeyDir(k Key) string { return s.be.Path(string(k.Kind), k.Hash()) }

// Path names something under the root, as errors, findings and claimctl
// show it (the backend's naming: a file path for a directory root, the
// root's URL and the key's path under it for etcd).
func (s *Store) Path(elem ...string) string { return s.be.Path(elem...) }

// RevisionPath names revision n of k, as Path does.
func (s *Store) RevisionPath(k Key, n uint64) string {
	return s.be.Path(string(k.Kind), k.Hash(), RevisionName(n))
}

// Self returns an owner for the calling process with the given incarnation
// (any JSON-encodable value, or nil), to pass to Acquire.
func (s *Store) Self(incarnation any) (Owner, error) {
	id, err := hostid.Self(s.host)
	if err != nil {
		return Owner{}, err
	}
	o := Owner{PID: id.PID, Start: id.Start, Boot: id.Boot, PIDNS: id.PIDNS}
	if incarnation != nil {
		if o.Incarnation, err = jsJSON(incarnation); err != nil {
			return Owner{}, err
		}
	}
	return o, nil
}
