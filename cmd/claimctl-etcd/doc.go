// Claimctl-etcd is claimctl with the etcd client linked: the same commands,
// flags, output and exit codes, on directory roots and on etcd roots
// (etcd://host:2379[,host:2379...]/prefix).
//
// claimctl runs it for a command on an etcd root, replacing its own process
// with it, so that claimctl itself starts without the etcd client's package
// initialisation. Install the two side by side:
//
//	go install github.com/claimstore/claimstore/cmd/...
//
// Usage: as claimctl (`claimctl-etcd help`, cmd/claimctl/REFERENCE.md).
package main
