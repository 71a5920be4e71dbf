package etcdbackend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dial, TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd root %s: cannot connect to %s within %v: %w", root, strings.Join(endpoints, ","), dial, err)
	}
	// clientv3.New returns before any endpoint answered; a status
	// request tells a dead cluster apart at once rather than at the
	// first read.
	ctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	var reached error = errors.New("no endpoint answered")
	for _, ep := range endpoints {
		if _, err := cli.Status(ctx, ep); err == nil {
			reached = nil
			break
		} else {
			reached = err
		}
	}
	if reached != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd root %s: no endpoint of %s answered within %v: %w", root, strings.Join(endpoints, ","), dial, reached)
	}
	b, err := New(cli, prefix, &Options{RequestTimeout: cfg.RequestTimeout, Root: root})
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
