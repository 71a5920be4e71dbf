//go:build linux

// Command rootgen writes a claim root of finished sessions quickly and
// honestly, for measuring what a long-lived root costs (docs/BENCHMARKS.md):
// the same files real lifecycles leave — each session a whole lifecycle
// (reserved, active, stopping, stopped with a cohort proof) on its key and
// on its seat's, records as this store writes them (taken from a real
// lifecycle run through the store, then given each session's key, claim,
// revision and time) — without the fsyncs that would make a year of
// history take hours to write. The result is fsck-clean. One syncfs at the
// end makes it durable.
//
//	go run ./internal/rootgen -root DIR -sessions 100000 -seats 20 -per-day 2000 [-held 0.01]
//	go run ./internal/rootgen -root DIR -active 10000
//
// Sessions are spread over the seats in turn and over time at -per-day,
// ending now; -held leaves that share of the newest sessions held
// (reserved, by an owner of an earlier boot), as a crash would.
//
// -active N writes instead a root as a power loss leaves it: N pairs, each
// its own seat and session, active with a spawn marker (reserved, then
// active with spawnMarker: true, on both keys), owned by a process of an
// earlier boot of this machine. `claimctl classify --all` stops every pair
// with a boot proof: three publishes per pair, what scripts/bench-process
// measures against the floor of their fsyncs.
package main
