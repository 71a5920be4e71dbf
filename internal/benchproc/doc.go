//go:build linux

// Command benchproc measures whole claimctl processes against floors
// measured in the same run, alternating (docs/BENCHMARKS.md, "Whole
// processes"); scripts/bench-process builds what it needs and runs it.
//
//	benchproc classify -claimctl BIN -gen ROOT -pairs N -rounds R -work DIR
//
// copies ROOT (a root of N pairs active with a spawn marker, as
// `rootgen -active N` writes it) twice per round: `claimctl classify --all`
// runs on one copy as a new process (its wall time and maximum RSS from
// wait4), and on the other the serial floor of what it must make durable
// is measured: per pair, three times (create a file of a record's size,
// write it, fsync it, fsync its directory) — in the proofs directory, the
// seat's key directory and the session's — with raw system calls, one
// after the other. The two alternate which goes first.
//
//	benchproc race -claimctl BIN -racers 16 -rounds R -work DIR
//
// starts, each round, RACERS `claimctl acquire` on one fresh pair at once
// (exactly one must win, the others exit 3, already-active) and RACERS
// `claimctl version` the same way, alternating which goes first, and
// reports the time until the last exited.
//
// Every figure is a median over the rounds, printed with the load average
// (/proc/loadavg) at the start and the end. Nothing is removed between
// rounds, and the machine's dirty pages are written back (sync) before each
// measured run: on an ext4 without a journal, creating an inode skips every
// inode freed in the last 60 s (360 s while its inode table block is
// dirty), at a cost linear in their number, so roots removed between rounds
// slowed the next round's creates by the benchmark's own doing, and their
// writeback fell into the next race.
package main
