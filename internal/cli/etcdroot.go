package cli

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/etcdbackend/rooturl"
)

// connFlags are how to reach an etcd root (--root etcd://host:2379/prefix):
// TLS files named as etcdctl names them, and timeouts. Every command that
// takes --root takes them; a directory root ignores them.
type connFlags struct {
	cacert, cert, key string
	dial, command     time.Duration
}

// connSyn is the connection flags' part of every synopsis that has --root.
const connSyn = "[--cacert FILE] [--cert FILE --key FILE] [--dial-timeout D] [--command-timeout D]"

// connFlagNames are the connection flags, accepted before the command too.
var connFlagNames = []string{"cacert", "cert", "key", "dial-timeout", "command-timeout"}

func registerConnFlags(fs *flag.FlagSet, c *connFlags) {
	fs.StringVar(&c.cacert, "cacert", "", "etcd root: verify the cluster's TLS certificate with this CA bundle (`file`, PEM)")
	fs.StringVar(&c.cert, "cert", "", "etcd root: TLS client certificate `file` (PEM), with --key")
	fs.StringVar(&c.key, "key", "", "etcd root: TLS client key `file` (PEM), with --cert")
	fs.DurationVar(&c.dial, "dial-timeout", 5*time.Second, "etcd root: wait at most `D` (5s, 1m) for the cluster to answer, then fail")
	fs.DurationVar(&c.command, "command-timeout", 5*time.Second, "etcd root: each request may take at most `D`; a write whose reply is lost is decided by reading it back, never guessed")
}

// isEtcdRoot reports whether a --root or CLAIMSTORE_ROOT value is an etcd
// root URL rather than a directory.
func isEtcdRoot(v string) bool { return rooturl.Is(v) }

// checkRootURL refuses a root that looks like a URL of a scheme claimctl
// does not know: taken as a directory, it would be a relative path.
func checkRootURL(v, source string) error {
	if isEtcdRoot(v) {
		if _, _, err := rooturl.Parse(v); err != nil {
			return usagef("%s: %v", source, err)
		}
		return nil
	}
	if i := strings.Index(v, "://"); i > 0 && !strings.Contains(v[:i], "/") {
		return usagef("%s %q: unknown root scheme %q; a claim root is a directory or etcd://host:2379[,host:2379...]/prefix", source, v, v[:i])
	}
	return nil
}

// Options configure claimctl's command line. A nil *Options is claimctl's
// own configuration.
type Options struct {
	// OpenEtcd opens the backend of an etcd root with the connection flags'
	// settings. cmd/claimctl-etcd sets it; cmd/claimctl leaves it nil so
	// that it links no etcd client (whose package initialisation would
	// double its start-up or more, paid by every run on every root), and hands a
	// command on an etcd root to claimctl-etcd instead (Main).
	OpenEtcd func(ctx context.Context, root string, conn EtcdConn) (claimstore.Backend, error)
}

// EtcdConn is how to reach an etcd root: the connection flags, named as
// etcdctl names them.
type EtcdConn struct {
	CACert, Cert, Key string        // PEM files; any of them turns TLS on
	DialTimeout       time.Duration // --dial-timeout
	CommandTimeout    time.Duration // --command-timeout, for each request
}

// openEtcdStore opens the store on an etcd root with opts, or hands the
// whole command to claimctl-etcd when this program has no etcd client.
func (e *env) openEtcdStore(rc rootChoice, opts *claimstore.Options) (*claimstore.Store, error) {
	if e.conn.dial <= 0 || e.conn.command <= 0 {
		return nil, usagef("--dial-timeout and --command-timeout must be positive")
	}
	if e.opts.OpenEtcd == nil {
		return nil, e.handOver()
	}
	be, err := e.opts.OpenEtcd(e.ctx, rc.Path, EtcdConn{CACert: e.conn.cacert, Cert: e.conn.cert, Key: e.conn.key, DialTimeout: e.conn.dial, CommandTimeout: e.conn.command})
	if err != nil {
		return nil, err
	}
	return claimstore.New(be, opts)
}

// rootJoin names something under a root, as claimstore.Store.Path does: a
// file path under a directory root, a key path under an etcd root's URL
// (whose "//" filepath.Join would collapse).
func rootJoin(root string, elem ...string) string {
	if isEtcdRoot(root) {
		return strings.Join(append([]string{root}, elem...), "/")
	}
	return filepath.Join(append([]string{root}, elem...)...)
}
