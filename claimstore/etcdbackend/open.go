package etcdbackend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore/etcdbackend/rooturl"
	"github.com/claimstore/claimstore/internal/safefile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Scheme is the URL scheme of an etcd claim root: etcd://host:port[,host:port...]/prefix.
const Scheme = rooturl.Scheme

// IsRoot reports whether root names an etcd claim root (etcd://...).
func IsRoot(root string) bool { return rooturl.Is(root) }

// RootError is a malformed etcd root URL.
type RootError = rooturl.Error

// ParseRoot splits an etcd root, etcd://host1:2379,host2:2379/prefix, into
// its endpoints (host:port) and its key prefix ("/prefix"). Every
// endpoint needs a port, and the prefix must name something: a claim root
// never takes the whole keyspace. It is rooturl.Parse, which a program can
// link without the etcd client.
func ParseRoot(root string) (endpoints []string, prefix string, err error) {
	return rooturl.Parse(root)
}

// Config is how to reach the cluster of an etcd root. A nil *Config means
// all defaults: plain TCP, 5s to connect, 5s per request.
type Config struct {
	// CACert, Cert and Key are PEM files, as etcdctl's --cacert, --cert
	// and --key: any of them turns TLS on; Cert and Key go together.
	CACert, Cert, Key string
	// DialTimeout bounds connecting to the cluster. Default: 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request (Options.RequestTimeout).
	// Default: 5s.
	RequestTimeout time.Duration
	// User and Password authenticate to a cluster with access control
	// enabled, as etcdctl's --user NAME:PASSWORD: the user's roles must
	// let it read and write the prefix. A Password is never shown in an
	// error. Without a User, the client certificate's common name is the
	// user (etcd's --client-cert-auth), or there is none.
	User, Password string
}

// Open connects to the cluster of an etcd root URL and returns its
// backend; Close closes the connection. It fails, naming the endpoints,
// when no endpoint answers within DialTimeout.
func Open(ctx context.Context, root string, cfg *Config) (*Backend, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	endpoints, prefix, err := ParseRoot(root)
	if err != nil {
		return nil, err
	}
	dial := cfg.DialTimeout
	if dial <= 0 {
		dial = 5 * time.Second
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Password != "" && cfg.User == "" {
		return nil, errors.New("etcd root " + root + ": a password was given without a user: give the user too (--user NAME)")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dial, TLS: tlsCfg, Logger: zap.NewNop(), Username: cfg.User, Password: cfg.Password})
	if err != nil {
		if isAccess(err) {
			// clientv3.New authenticates: a wrong password or an
			// unknown user fails here.
			return nil, fmt.Errorf("etcd root %s: %w: authenticating as user %s failed: wrong user name or password, or no such user (%v)", root, ErrAccessDenied, cfg.User, err)
		}
		return nil, fmt.Errorf("etcd root %s: cannot connect to %s within %v: %w%s", root, strings.Join(endpoints, ","), dial, err, tlsHint(err, cfg))
	}
	// clientv3.New returns before any endpoint answered; a status
	// request tells a dead cluster apart at once rather than at the
	// first read.
	// Every endpoint is asked at once, and the first answer will do: a
	// dead member listed first must not use up the time of the others
	// (a status request waits for its endpoint until the deadline).
	reached := firstAnswer(ctx, cli, endpoints, dial)
	if reached != nil {
		cli.Close()
		if tlsCfg != nil {
			// gRPC retries a failed handshake until the deadline and
			// reports only the deadline: shake hands once more, alone,
			// to find what the cluster said.
			if perr := probeTLS(endpoints[0], tlsCfg, dial); perr != nil {
				reached = fmt.Errorf("%w (a TLS handshake with %s: %v)", reached, endpoints[0], perr)
			}
		}
		return nil, fmt.Errorf("etcd root %s: no endpoint of %s answered within %v: %w%s", root, strings.Join(endpoints, ","), dial, reached, tlsHint(reached, cfg))
	}
	b, err := New(cli, prefix, &Options{RequestTimeout: cfg.RequestTimeout, Root: root, User: cfg.User})
	if err != nil {
		cli.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// Close closes the client when Open made it; a backend made by New leaves
// its client to the caller.
func (b *Backend) Close() error {
	if b.owned {
		return b.cli.Close()
	}
	return nil
}

func tlsConfig(cfg *Config) (*tls.Config, error) {
	if cfg.CACert == "" && cfg.Cert == "" && cfg.Key == "" {
		return nil, nil
	}
	if (cfg.Cert == "") != (cfg.Key == "") {
		return nil, errors.New("etcd TLS: --cert and --key go together: give both, or neither")
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CACert != "" {
		pem, err := readPEM(cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: --cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd TLS: --cacert %s holds no PEM certificate", cfg.CACert)
		}
		t.RootCAs = pool
	}
	if cfg.Cert != "" {
		cert, err := readPEM(cfg.Cert)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: --cert: %w", err)
		}
		key, err := readPEM(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: --key: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: --cert %s / --key %s: %w", cfg.Cert, cfg.Key, err)
		}
		// The cluster would refuse an expired certificate with a bare
		// "bad certificate": say which and when, before connecting.
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
			now := time.Now()
			switch {
			case now.After(leaf.NotAfter):
				return nil, fmt.Errorf("etcd TLS: --cert %s expired at %s (subject %q): the cluster refuses it; renew it (a certificate from the cluster's CA, for this supervisor's identity)", cfg.Cert, leaf.NotAfter.UTC().Format(time.RFC3339), leaf.Subject.CommonName)
			case now.Before(leaf.NotBefore):
				return nil, fmt.Errorf("etcd TLS: --cert %s is not valid before %s (subject %q): check this machine's clock, or wait", cfg.Cert, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.Subject.CommonName)
			}
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}

// maxPEM bounds what is read of a certificate or key file: a chain is a
// few kilobytes.
const maxPEM = 1 << 20

// readPEM reads a certificate or key file as tls.LoadX509KeyPair would, but
// never blocks on a FIFO or a device given in its place, and bounds the
// read. A symlink is followed: certificates are often installed as links.
func readPEM(name string) ([]byte, error) {
	b, err := safefile.ReadFile(name, maxPEM, &safefile.Options{Follow: true})
	if err != nil {
		return nil, err
	}
	if len(b) > maxPEM {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("more than %d bytes: not a certificate or key", maxPEM)}
	}
	return b, nil
}

// probeTLS shakes hands with endpoint and waits briefly for what the
// server says: a server that refuses the client's certificate sends an
// alert (under TLS 1.3 after the handshake, so it is read). nil means
// nothing went wrong within the time.
func probeTLS(endpoint string, cfg *tls.Config, timeout time.Duration) error {
	c := cfg.Clone()
	if host, _, err := net.SplitHostPort(endpoint); err == nil && c.ServerName == "" {
		c.ServerName = host
	}
	c.NextProtos = []string{"h2"}
	d := &net.Dialer{Timeout: min(timeout, 2*time.Second)}
	conn, err := tls.DialWithDialer(d, "tcp", endpoint, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(min(timeout, time.Second)))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

// tlsHint says what a TLS failure to connect means, or "".
func tlsHint(err error, cfg *Config) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "certificate required"):
		if cfg.Cert == "" {
			return "; the cluster requires a client certificate: give --cert and --key"
		}
		return fmt.Sprintf("; the cluster refused the client certificate %s: it is not signed by a CA the cluster trusts (its --trusted-ca-file), or was revoked; use a certificate the cluster's CA issued for this supervisor", cfg.Cert)
	case strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, "x509:"):
		if cfg.CACert == "" {
			return "; the cluster's certificate is not trusted by this machine: give --cacert with the CA that signed it"
		}
		return fmt.Sprintf("; the cluster's certificate does not verify against --cacert %s: give the CA that signed the cluster's certificates", cfg.CACert)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "; the cluster serves plain TCP: drop --cacert, --cert and --key (or use the cluster's TLS port)"
	case strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF") && cfg.CACert == "" && cfg.Cert == "":
		return "; if the cluster serves TLS, give --cacert (and --cert and --key for client authentication)"
	}
	return ""
}

// firstAnswer asks every endpoint for its status at once and returns nil
// as soon as one answers, or the last error when none does within dial.
// A refusal of access control (Status needs an authenticated user) is an
// answer: the first request then says what to do.
func firstAnswer(ctx context.Context, cli *clientv3.Client, endpoints []string, dial time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	errs := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			_, err := cli.Status(ctx, ep)
			if isAccess(err) {
				err = nil
			}
			errs <- err
		}()
	}
	var last error
	for range endpoints {
		if last = <-errs; last == nil {
			return nil
		}
	}
	return last
}
