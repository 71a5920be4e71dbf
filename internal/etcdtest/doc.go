// Package etcdtest starts real etcd servers for tests: in-process
// (go.etcd.io/etcd/server/v3/embed), on free loopback ports, with their data
// in the test's temporary directory, stopped in t.Cleanup. Start(t, 1) is a
// single member; Start(t, 3) a cluster whose members can be killed and
// restarted (Kill, Restart) and whose leader can be found (Leader).
//
// Proxy is a TCP proxy between a client and a member that a test controls:
// it can cut the next request at a chosen point (before it is forwarded,
// after it is forwarded with its reply dropped, or held back and delivered
// late), or partition the client altogether, so that tests can lose replies
// in flight as a network does.
//
// Under -short, Start and StartTLS skip the test with the reason (LeftOut),
// except when CI is set: CI runs every etcd test.
//
// Caveat: a port is chosen free (below the kernel's ephemeral range, so
// that no outgoing connection is given it) and then bound by etcd; another
// listener can take it in between. A new cluster then starts again on other
// ports (three attempts); a restarted member fails (it never silently uses
// another server).
package etcdtest
