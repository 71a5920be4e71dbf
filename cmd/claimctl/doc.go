// Claimctl is the operator tool of claimstore: it runs a command under a
// claim (a supervisor in one command), waits for a pair, and shows, logs,
// classifies, checks and (for scripts and tests) takes, advances and releases
// the crash-safe writer claims a session supervisor keeps on seats and
// sessions.
//
// Usage:
//
//	claimctl run      [--root DIR|URL] [CONN] PAIR [--claim-id ID] [--set NAME=JSON]... [--units MODE] [--bus ADDR] [--no-unit] [--wait] [--timeout D] [--adopt] -- CMD [ARG]...
//	claimctl wait     [--root DIR|URL] [CONN] [--json] PAIR [--timeout D]
//	claimctl list     [--root DIR|URL] [CONN] [--json] [--all] [--state STATE]
//	claimctl show     [--root DIR|URL] [CONN] [--json] (--seat S --project P --workspace W [--session ID] | --session ID | --claim ID)
//	claimctl log      [--root DIR|URL] [CONN] [--json] [--full] (--seat S --project P --workspace W | --session ID)
//	claimctl classify [--root DIR|URL] [CONN] [--json] [--dry-run] [--units auto|user|system|none] [--bus ADDR] (PAIR | --all)
//	claimctl fsck     [--root DIR|URL] [CONN] [--json] [--repair]
//	claimctl acquire  [--root DIR|URL] [CONN] [--json] PAIR [--owner-pid PID] [--incarnation JSON] [--claim-id ID] [--unit NAME] [--set NAME=JSON]...
//	claimctl advance  [--root DIR|URL] [CONN] [--json] PAIR --claim ID [--seat-rev N --session-rev N] [--state S] [--spawn-marker] [--set NAME=JSON]...
//	claimctl release  [--root DIR|URL] [CONN] [--json] PAIR --claim ID [--seat-rev N --session-rev N] --proof KIND[:REF]
//	claimctl copy     --from ROOT --to ROOT [CONN] [--json]
//	claimctl version  [--json]
//	claimctl help     [COMMAND | exit-codes | json | root]
//
// where PAIR is --seat S --project P --workspace W --session ID, and CONN
// are the connection flags of an etcd root: [--cacert FILE] [--cert FILE
// --key FILE] [--user NAME[:PASSWORD]] [--password PASSWORD]
// [--dial-timeout D] [--command-timeout D].
//
// The claim root is a directory, or etcd://host:2379[,host:2379...]/prefix
// for a root kept in an etcd cluster shared by several machines. It is
// --root, else $CLAIMSTORE_ROOT, else /var/lib/claimstore
// for root and $XDG_STATE_HOME/claimstore (~/.local/state/claimstore) for
// other users. Every command but run takes --json. Exit codes are stable: 0
// success, 1 error, 2 usage, 3 already-active, 4 unsafe-replacement, 5
// foreign-host, 6 classify left a pair uncertain (run: the claim left held),
// 7 fsck found errors, 8 timeout (wait, run --wait); run otherwise exits with
// its command's status. REFERENCE.md is the
// full reference; `claimctl help` prints the same tables.
//
// claimctl links no etcd client, to keep its start-up short (a racing
// supervisor starts it once per attempt): a command on an etcd root is
// handed, whole and unchanged, to claimctl-etcd — the same command line with
// the client linked — found next to claimctl or on $PATH. The command line
// itself is internal/cli.
package main
