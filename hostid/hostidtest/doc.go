// Package hostidtest is the one fake hostid.Host of the test suites: a
// machine whose ids and process table a test sets, with nothing read from
// the machine the tests run on.
//
// A Host presents Machine and Boot as its ids (Machine and Boot, the
// constants, when the fields are empty), the processes of Procs as running
// with the recorded start ticks, those of Zombies among them as exited but
// not reaped, those of Hidden as existing behind a /proc entry the judge
// may not read (kill(pid, 0) answers EPERM), and every other pid as gone
// (no /proc entry, ESRCH). Every process, the caller's own included, runs
// in PIDNS, or in the initial PID namespace when it is empty, so that
// owners recorded without a namespace are judged as the reference judged
// them.
//
// A test changes the fields between operations (a reboot is a new Boot, an
// owner's death is a deletion from Procs), never while a store may be
// reading them: a Host is safe for concurrent use only while nothing writes
// to it.
//
// The ids are returned as given, not checked, so a test can present a
// malformed one. To present other ids on top of the real machine (real
// processes, a fixed machine or boot id), use hostid.Override instead.
package hostidtest
