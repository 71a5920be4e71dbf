// Package rooturl parses the URL of an etcd claim root,
// etcd://host:2379[,host:2379...]/prefix, and nothing more.
//
// It exists apart from etcdbackend so that a program can recognise and
// check an etcd root without linking the etcd client: claimctl does (its
// start-up would otherwise pay for the client's package initialisation on
// every run, directory roots included) and hands a command on an etcd root
// to claimctl-etcd. etcdbackend's Scheme, IsRoot, RootError and ParseRoot
// are this package's.
package rooturl
