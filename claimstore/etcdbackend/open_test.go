package etcdbackend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

func TestParseRoot(t *testing.T) {
	eps, prefix, err := etcdbackend.ParseRoot("etcd://h1:2379,10.0.0.2:2379,[::1]:2379/team/claims/")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"h1:2379", "10.0.0.2:2379", "[::1]:2379"}, eps); diff != "" || prefix != "/team/claims" {
		t.Errorf("endpoints (-want +got):\n%s prefix %q", diff, prefix)
	}
	for _, bad := range []string{"etcd://", "etcd:///p", "etcd://h1/p", "etcd://h1:2379", "etcd://h1:2379/", "etcd://h1:2379//p", "etcd://h1:2379/p?x", "http://h1:2379/p", "etcd://h1:2379,/p"} {
		var re *etcdbackend.RootError
		if _, _, err := etcdbackend.ParseRoot(bad); !errors.As(err, &re) || re.Root != bad {
			t.Errorf("ParseRoot(%q) = %v, want a *RootError naming it", bad, err)
		}
	}
}

// TestOpen: Open reaches a real member and the backend works; a root no
// member answers fails within the dial timeout, naming the endpoint; bad
// TLS files fail before dialling, naming the flag.
func TestOpen(t *testing.T) {
	c := etcdtest.Start(t, 1)
	b, err := etcdbackend.Open(context.Background(), "etcd://"+c.Hosts()[0]+"/open", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("a", 32)}
	if err := b.Publish(context.Background(), loc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	if n, _, err := b.Head(context.Background(), loc); n != 1 || err != nil {
		t.Errorf("Head = %d, %v", n, err)
	}

	dead := etcdtest.NewProxy(t, "127.0.0.1:1") // accepts, then cannot reach anything
	start := time.Now()
	_, err = etcdbackend.Open(context.Background(), "etcd://"+dead.Addr()+"/p", &etcdbackend.Config{DialTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), dead.Addr()) || time.Since(start) > 5*time.Second {
		t.Errorf("Open of a dead root: %v after %v; want an error naming %s within the dial timeout", err, time.Since(start), dead.Addr())
	}

	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg  etcdbackend.Config
		want string
	}{
		{etcdbackend.Config{Cert: junk}, "--cert and --key go together"},
		{etcdbackend.Config{CACert: filepath.Join(dir, "missing.pem")}, "--cacert"},
		{etcdbackend.Config{CACert: junk}, "holds no PEM certificate"},
		{etcdbackend.Config{Cert: junk, Key: junk}, "--cert " + junk},
	} {
		if _, err := etcdbackend.Open(context.Background(), "etcd://"+c.Hosts()[0]+"/p", &tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open with %+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestOpenTLS: a member that serves clients over TLS only and requires a
// client certificate is reached with --cacert/--cert/--key's files, and
// refused without a client certificate or without TLS.
func TestOpenTLS(t *testing.T) {
	c, f := etcdtest.StartTLS(t)
	root := "etcd://" + c.Hosts()[0] + "/tls"
	b, err := etcdbackend.Open(context.Background(), root, &etcdbackend.Config{CACert: f.CACert, Cert: f.ClientCert, Key: f.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	loc := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("b", 32)}
	if err := b.Publish(context.Background(), loc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Read(context.Background(), loc, 1); err != nil || string(got) != "x\n" {
		t.Errorf("Read over TLS = %q, %v", got, err)
	}
	for name, cfg := range map[string]*etcdbackend.Config{
		"no client certificate": {CACert: f.CACert, DialTimeout: time.Second},
		"no TLS":                {DialTimeout: time.Second},
	} {
		if b, err := etcdbackend.Open(context.Background(), root, cfg); err == nil {
			b.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
}
