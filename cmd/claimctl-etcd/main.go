package main

import (
	"context"
	"os"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/cli"
)

func main() { os.Exit(cli.Main(&cli.Options{OpenEtcd: openEtcd})) }

func openEtcd(ctx context.Context, root string, c cli.EtcdConn) (claimstore.Backend, error) {
	return etcdbackend.Open(ctx, root, &etcdbackend.Config{CACert: c.CACert, Cert: c.Cert, Key: c.Key, User: c.User, Password: c.Password, DialTimeout: c.DialTimeout, RequestTimeout: c.CommandTimeout})
}
