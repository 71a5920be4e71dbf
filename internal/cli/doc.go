// Package cli is claimctl's command line: every command, its flags, help,
// man page, shell completion, JSON output and exit codes, over the
// claimstore API. The programs cmd/claimctl and cmd/claimctl-etcd are each a
// main that calls Main.
//
// The two differ only in Options.OpenEtcd. claimctl leaves it nil and so
// links no etcd client, whose package initialisation would otherwise be paid
// at every start, on every root; a command on an etcd root is then handed,
// whole and before it touched anything, to claimctl-etcd, which replaces the
// process (handover.go). claimctl-etcd sets it.
//
// Everything a script relies on — exit codes, refusal kinds, JSON fields,
// synopses — is documented in cmd/claimctl/REFERENCE.md and kept in step
// with the tables here by lockstep_test.go, in both directions. The
// end-to-end scripts in testdata run the test binary as claimctl
// (testscript), with claimctl-etcd's options, on directory and etcd roots.
package cli
