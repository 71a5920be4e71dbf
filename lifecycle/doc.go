// Package lifecycle runs one writer under a claim, in the order the claim
// protocol needs, so that a Go supervisor does not reimplement it:
//
//	acquire (reserved) → mark the spawn (reserved, spawnMarker) → start the
//	writer through a Starter → active, recording the run's id (invocationId)
//	→ wait for the writer to end → release, stopped with a cohortProof
//	naming the run and how it ended.
//
// Stop (a stop request: stopping, then the writer is stopped and waited for)
// and Adopt (a new supervisor takes over a claim whose owner died, through
// claimstore's classify adoption, and re-attaches to the run it recorded)
// complete it.
//
// # Contract
//
// The spawn marker is durable before the Starter is called: a supervisor
// killed at any moment after that leaves a claim that classify never frees
// on an absent unit (an absent unit after a spawn is an observation, not a
// proof). A claim is released only on a Process's word that its writer is
// over (Wait returned without error); every other ending leaves it held,
// with the reason in the error. Nothing here decides on a guess or a
// timeout.
//
// Starters: the systemd one is package unitctl (a transient service over
// D-Bus); GroupStarter, here, runs the writer as a direct child in a
// process group of its own, for machines without a service manager. This
// package imports neither D-Bus nor systemd.
//
// # Concurrency
//
// A Run is used by one goroutine at a time, except Stop, which may be
// called while another goroutine waits in Wait.
package lifecycle
