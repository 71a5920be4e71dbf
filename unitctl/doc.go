// Package unitctl starts, watches and stops a claim's writer as a transient
// systemd service over D-Bus (go-systemd's StartTransientUnit), for package
// lifecycle: Manager is its Starter and its Attacher.
//
// It lives beside unitprobe, not in it: unitprobe only looks (one call per
// lookup, bounded, every failure "unknown"), which is what classify needs
// and all it may do; unitctl acts (it makes units, holds a reference on
// them, stops them and follows their signals), which only a supervisor
// does. Neither is imported by package claimstore.
//
// # Contract
//
// A started unit is a service of Type=exec (Start returns once the command
// was executed; one that cannot be executed is a run that failed with
// status 203, systemd's EXIT_EXEC), KillMode=control-group (stopping it
// stops every process of its control group), AddRef=yes (the unit stays
// loaded, with its result, while the Manager's connection lives: its end
// can always be read) and CollectMode=inactive-or-failed (collected once
// unreferenced, failed or not: nothing is left behind), with the claim's
// variables in its environment. The command's arguments are passed as
// given ("$" is escaped from the manager's $VAR substitution). Standard
// input, output and error are the caller's files when given (passed over
// the bus; the manager keeps them open while the unit lives), else the
// journal (output) and /dev/null (input).
//
// Waiting for the end follows the manager's PropertiesChanged signals for
// the unit: each signal (or a lost one) wakes the waiter, which then reads
// the unit's properties; nothing polls. A run is over when the manager
// reports the unit inactive or failed under the recorded InvocationID, or
// a later invocation (the recorded one has ended), or — the unit no longer
// loaded — when its control group is empty or gone. Anything else (no
// answer, an unreadable control group) is not a proof, and Wait and Attach
// say so with an error.
//
// # Caveats
//
// The waiter relies on the bus connection: if the bus goes away, Wait
// returns a NotOverError (the claim stays held) rather than wait for
// signals that cannot come. If the manager alone dies (the bus lives on),
// no signal says so, and Wait waits until its context ends; the claim is
// held meanwhile, which is safe, but claimctl run then waits until it is
// signalled. A unit started on another
// manager than the one a Manager dials is not seen.
package unitctl
