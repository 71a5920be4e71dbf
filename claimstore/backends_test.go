package claimstore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// backendCase is one backend the behavioural suite runs over. newRoot
// returns, for a fresh empty root, an opener of stores on it: each call is
// a separate Store (a separate supervisor) sharing that root.
type backendCase struct {
	name    string
	newRoot func(t testing.TB) func(opts *TOpts) (*Store, error)
	// root returns a fresh root's name for openStore and openOn.
	root func(t testing.TB) string
	// dir is true for the directory backend, whose root is a path the
	// test may also read and write by hand.
	dir bool
}

// backends returns the directory backend and the etcd backend (on a
// single-member etcd started for this test and stopped in its cleanup);
// see etcdLeftOut for when etcd is left out.
func backends(t *testing.T) []backendCase {
	t.Helper()
	out := []backendCase{{name: "dir", dir: true, root: newRoot, newRoot: func(t testing.TB) func(*TOpts) (*Store, error) {
		root := newRoot(t)
		return func(opts *TOpts) (*Store, error) { return OpenRoot(root, opts) }
	}}}
	if why := etcdLeftOut(); why != "" {
		t.Log(why)
		return out
	}
	var c *etcdtest.Cluster
	var cli *clientv3.Client
	etcdRootOf := func(tb testing.TB) (string, string) {
		if c == nil {
			c = etcdtest.Start(t, 1)
			cli = c.Client(t)
		}
		prefix := etcdtest.Prefix(tb)
		root := "etcd://" + strings.Join(c.Hosts(), ",") + prefix
		etcdRoots.Store(root, etcdRoot{cli: cli, prefix: prefix})
		return root, prefix
	}
	out = append(out, backendCase{name: "etcd", root: func(tb testing.TB) string {
		root, _ := etcdRootOf(tb)
		return root
	}, newRoot: func(tb testing.TB) func(*TOpts) (*Store, error) {
		root, prefix := etcdRootOf(tb)
		return func(opts *TOpts) (*Store, error) {
			be, err := etcdbackend.New(cli, prefix, testEtcdOptions)
			if err != nil {
				return nil, err
			}
			o := TOpts{}
			if opts != nil {
				o = *opts
			}
			o.Backend = be
			return OpenRoot(root, &o)
		}
	}})
	return out
}

// etcdRoots maps the URL roots the etcd backend case hands out to the
// client and prefix they stand for, so that openStore, openOn and the
// helpers that read a key's history (dirFiles, readRev, writeRev) work on
// either backend unchanged.
var etcdRoots sync.Map // root URL -> etcdRoot

type etcdRoot struct {
	cli    *clientv3.Client
	prefix string
}

// backendFor returns a new backend for a root handed out by an etcd
// backend case, or nil (the directory backend) for any other root.
func backendFor(t testing.TB, root string) Backend {
	v, ok := etcdRoots.Load(root)
	if !ok {
		return nil
	}
	r := v.(etcdRoot)
	be, err := etcdbackend.New(r.cli, r.prefix, testEtcdOptions)
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// forBackends runs body once per backend (backends), as a subtest named
// after it; body gets the backend's newRoot, which it uses in place of the
// package's (a path for the directory backend, an etcd:// URL for etcd).
func forBackends(t *testing.T, body func(t *testing.T, newRoot func(testing.TB) string)) {
	t.Helper()
	for _, bc := range backends(t) {
		t.Run(bc.name, func(t *testing.T) { body(t, bc.root) })
	}
}

// etcdLeftOut says why the etcd runs are left out, or "" when they run:
// only outside CI, with CLAIMSTORE_TEST_ETCD=off (iterating locally) or
// -short (internal/mutate's runs, whose targets are the core and the
// directory backend: an etcd run per mutant would cost its budget and
// test nothing more of them; they set etcdtest.ShortEnv, which keeps the
// package's direct etcd tests, not this case). With CI set they always
// run.
func etcdLeftOut() string {
	switch {
	case os.Getenv("CI") != "":
		return ""
	case os.Getenv("CLAIMSTORE_TEST_ETCD") == "off":
		return "CLAIMSTORE_TEST_ETCD=off: the etcd backend is left out"
	case testing.Short():
		return "-short: the etcd backend is left out (CI runs it)"
	}
	return ""
}

// openWith opens a store with the test host and clock, as openStore does,
// on a root of a backendCase.
func openWith(t testing.TB, open func(*TOpts) (*Store, error), opts *TOpts) *Store {
	t.Helper()
	if opts == nil {
		opts = &TOpts{}
	}
	if opts.Host == nil {
		opts.Host = thisHost
	}
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	s, err := open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// replaceRev replaces revision n of k by hand, as an operator or a bad
// disk might: outside the protocol, which never rewrites a revision.
func replaceRev(t testing.TB, s *Store, k Key, n uint64, data []byte) {
	t.Helper()
	if be, ok := s.be.(*etcdbackend.Backend); ok {
		if _, err := be.Client().Put(context.Background(), be.RevisionKey(k.Loc(), n), string(data)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Chmod(s.KeyDir(k), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.KeyDir(k), RevisionName(n))); err != nil {
		t.Fatal(err)
	}
	writeRev(t, s, k, n, data)
}

// removeRev removes revision n of k by hand (a lost file, a deleted key):
// outside the protocol, which never removes a revision.
func removeRev(t testing.TB, s *Store, k Key, n uint64) {
	t.Helper()
	if be, ok := s.be.(*etcdbackend.Backend); ok {
		if _, err := be.Client().Delete(context.Background(), be.RevisionKey(k.Loc(), n)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Remove(filepath.Join(s.KeyDir(k), RevisionName(n))); err != nil {
		t.Fatal(err)
	}
}

// putProof writes (or overwrites) a proof on an etcd root by hand.
func putProof(t testing.TB, s *Store, id string, data []byte) {
	t.Helper()
	be := s.be.(*etcdbackend.Backend)
	if _, err := be.Client().Put(context.Background(), be.ProofKey(id), string(data)); err != nil {
		t.Fatal(err)
	}
}

// testEtcdOptions are the etcd backend's options in the behavioural suite:
// a request timeout far above the default, so that a test machine loaded
// by -race and other work never turns a slow reply into a failed
// operation the suite did not expect (the lost-reply and fault tests use
// short timeouts on purpose).
var testEtcdOptions = &etcdbackend.Options{RequestTimeout: 30 * time.Second}
