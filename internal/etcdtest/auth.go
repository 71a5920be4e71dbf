package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// User is an etcd user EnableAuth made.
type User struct{ Name, Password string }

// Users are the identities EnableAuth makes: Writer may read and write
// the claim root's prefix (what a supervisor needs), Reader may only read
// it, and Stranger has no role at all.
type Users struct {
	Root, Writer, Reader, Stranger User
}

// EnableAuth turns etcd's access control on, as an operator would with
// etcdctl (user add, role add, role grant-permission --prefix, user grant-role,
// auth enable), for the claim root under prefix ("/claims"): the roles
// cover the keys under prefix + "/".
func EnableAuth(t testing.TB, c *Cluster, prefix string) Users {
	t.Helper()
	u := Users{
		Root:     User{"root", "root-secret"},
		Writer:   User{"supervisor", "writer-secret"},
		Reader:   User{"auditor", "reader-secret"},
		Stranger: User{"stranger", "stranger-secret"},
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from, to := prefix+"/", clientv3.GetPrefixRangeEnd(prefix+"/")
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, u.Root.Name, u.Root.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, u.Root.Name, "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "claims-rw"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "claims-rw", from, to, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.RoleAdd(ctx, "claims-ro"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "claims-ro", from, to, clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, u.Writer.Name, u.Writer.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, u.Writer.Name, "claims-rw"); return err },
		func() error { _, err := cli.UserAdd(ctx, u.Reader.Name, u.Reader.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, u.Reader.Name, "claims-ro"); return err },
		func() error { _, err := cli.UserAdd(ctx, u.Stranger.Name, u.Stranger.Password); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcdtest: setting up access control: %v", err)
		}
	}
	return u
}
