package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	user, password    string
	dial, command     time.Duration
}

// connSyn is the connection flags' part of every synopsis that has --root.
const connSyn = "[--cacert FILE] [--cert FILE --key FILE] [--user NAME[:PASSWORD]] [--password PASSWORD] [--dial-timeout D] [--command-timeout D]"

// connFlagNames are the connection flags, accepted before the command too.
var connFlagNames = []string{"cacert", "cert", "key", "user", "password", "dial-timeout", "command-timeout"}

// envPassword is where the password of --user NAME is read from when
// neither --user NAME:PASSWORD nor --password gives it (a command line is
// visible to every user of the machine; the environment is not).
const envPassword = "CLAIMSTORE_ETCD_PASSWORD"

func registerConnFlags(fs *flag.FlagSet, c *connFlags) {
	fs.StringVar(&c.cacert, "cacert", "", "etcd root: verify the cluster's TLS certificate with this CA bundle (`file`, PEM)")
	fs.StringVar(&c.cert, "cert", "", "etcd root: TLS client certificate `file` (PEM), with --key")
	fs.StringVar(&c.key, "key", "", "etcd root: TLS client key `file` (PEM), with --cert")
	fs.StringVar(&c.user, "user", "", "etcd root: authenticate as etcd user `NAME` (NAME:PASSWORD also, as etcdctl's --user); without a password it is taken from --password, else from the environment variable "+envPassword+" (never shown), else asked for on a terminal without echo")
	fs.StringVar(&c.password, "password", "", "etcd root: the `password` of --user NAME (then NAME may contain a colon); a command line is visible to other users: prefer "+envPassword+" in the environment")
	fs.DurationVar(&c.dial, "dial-timeout", 5*time.Second, "etcd root: wait at most `D` (5s, 1m) for the cluster to answer, then fail")
	fs.DurationVar(&c.command, "command-timeout", 5*time.Second, "etcd root: each request may take at most `D`; a write whose reply is lost is decided by reading it back, never guessed")
}

// isEtcdRoot reports whether a --root or CLAIMSTORE_ROOT value is an etcd
// root URL rather than a directory.
func isEtcdRoot(v string) bool { return rooturl.Is(v) }

// maxRootLen bounds a --root or CLAIMSTORE_ROOT value: PATH_MAX, counting
// its NUL, is 4096 on Linux.
const maxRootLen = 4095

// checkRootURL refuses a root that looks like a URL of a scheme claimctl
// does not know: taken as a directory, it would be a relative path.
func checkRootURL(v, source string) error {
	if len(v) > maxRootLen {
		// Longer than any path the kernel takes (PATH_MAX) or any root
		// URL needs: refused here, before every message and system call
		// that would echo it whole.
		return usagef("%s %s is longer than the %d bytes a claim root may have (a path the kernel takes); give the root's path or etcd:// URL", source, quotePrefix(v), maxRootLen)
	}
	if isEtcdRoot(v) {
		if _, _, err := rooturl.Parse(v); err != nil {
			return usagef("%s: %v", source, err)
		}
		return nil
	}
	if i := strings.Index(v, "://"); i > 0 && !strings.Contains(v[:i], "/") {
		return usagef("%s %s: unknown root scheme %s; a claim root is a directory or etcd://host:2379[,host:2379...]/prefix", source, quotePrefix(v), quotePrefix(v[:i]))
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
	User, Password    string        // --user, and its password from wherever it came; never shown
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
	user, password, err := e.credentials()
	if err != nil {
		return nil, err
	}
	be, err := e.opts.OpenEtcd(e.ctx, rc.Path, EtcdConn{CACert: e.conn.cacert, Cert: e.conn.cert, Key: e.conn.key, User: user, Password: password, DialTimeout: e.conn.dial, CommandTimeout: e.conn.command})
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

// credentials returns the etcd user and password of --user and
// --password, as etcdctl reads them: --user NAME:PASSWORD splits at the
// first colon unless --password is given; a --user without a password
// takes $CLAIMSTORE_ETCD_PASSWORD, else asks for it on the terminal
// without echo. It runs in the program that opens the root (after a hand
// over to claimctl-etcd), so the prompt is shown once. No message shows a
// password.
func (e *env) credentials() (user, password string, err error) {
	c := e.conn
	if c.user == "" {
		if c.password != "" {
			return "", "", usagef("--password without --user: name the etcd user with --user NAME")
		}
		return "", "", nil
	}
	user = c.user
	switch {
	case c.password != "":
		password = c.password
	case strings.Contains(user, ":"):
		user, password, _ = strings.Cut(user, ":")
	}
	if user == "" {
		return "", "", usagef("--user: the etcd user name is empty: give --user NAME[:PASSWORD]")
	}
	if password != "" {
		return user, password, nil
	}
	if p := e.getenv(envPassword); p != "" {
		return user, p, nil
	}
	f, ok := e.stdin.(*os.File)
	if !ok || !isTerminalFd(int(f.Fd())) {
		return "", "", usagef("--user %s has no password and standard input is not a terminal to ask for one: set $%s (or give --user NAME:PASSWORD or --password, which other users of this machine can see)", user, envPassword)
	}
	fmt.Fprintf(e.stderr, "Password for etcd user %s: ", user)
	password, err = readPassword(f)
	fmt.Fprintln(e.stderr)
	if err != nil {
		return "", "", fmt.Errorf("reading the password of etcd user %s from the terminal: %w", user, err)
	}
	if password == "" {
		return "", "", usagef("no password was typed for etcd user %s", user)
	}
	return user, password, nil
}

// connArgs are the connection flags of this command as a command line
// that finishes its work needs them on an etcd root: the TLS files, the
// user without its password (which the command then takes as this one
// did), and the timeouts when not the defaults; nothing for a directory.
func (e *env) connArgs(root string) []string {
	if !isEtcdRoot(root) {
		return nil
	}
	c := e.conn
	var out []string
	for _, f := range []struct{ name, v string }{{"cacert", c.cacert}, {"cert", c.cert}, {"key", c.key}} {
		if f.v != "" {
			out = append(out, "--"+f.name, f.v)
		}
	}
	if c.user != "" {
		user := c.user
		if c.password == "" {
			user, _, _ = strings.Cut(user, ":")
		}
		out = append(out, "--user", user)
	}
	if c.dial != 5*time.Second {
		out = append(out, "--dial-timeout", c.dial.String())
	}
	if c.command != 5*time.Second {
		out = append(out, "--command-timeout", c.command.String())
	}
	return out
}
