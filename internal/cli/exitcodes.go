package cli

import "github.com/claimstore/claimstore/claimstore"

// exitCode is the status claimctl exits with. Every value claimctl can exit
// with is one of the constants below, and each is listed in exitCodes; the
// lockstep test checks both, and REFERENCE.md and `claimctl help exit-codes`
// against them.
type exitCode int

const (
	exitOK                exitCode = 0
	exitError             exitCode = 1
	exitUsage             exitCode = 2
	exitAlreadyActive     exitCode = 3
	exitUnsafeReplacement exitCode = 4
	exitForeignHost       exitCode = 5
	exitUncertain         exitCode = 6
	exitFsckErrors        exitCode = 7
	exitTimeout           exitCode = 8
)

// exitCodeDoc documents one exit code.
type exitCodeDoc struct {
	Code    exitCode
	Name    string
	Meaning string
}

// exitCodes is the table of exit codes, in order.
var exitCodes = []exitCodeDoc{
	{exitOK, "ok", "success; for classify, every pair is free or stopped with a proof"},
	{exitError, "error", "an I/O error, an unsafe or unreadable root, damaged input, a claim or key not found"},
	{exitUsage, "usage", "a bad command, flag or flag value; nothing was touched on disk"},
	{exitAlreadyActive, string(claimstore.AlreadyActive), "refused: a live or possibly live owner holds the key"},
	{exitUnsafeReplacement, string(claimstore.UnsafeReplacement), "refused: the key is held in a state nobody can prove over (damaged, two claims, a head that moved, stopping, uncertain)"},
	{exitForeignHost, string(claimstore.ForeignHost), "refused: the key is held by a claim taken on another machine"},
	{exitUncertain, "uncertain", "classify: the pair is left held with nothing to prove its writer over (uncertain or stopping, damaged, held by two claims, needing a boot proof); with --all, some pair or orphan key is left held for any reason (the summary says which); run: the claim had to be left held, its writer not proven over (the message says why)"},
	{exitFsckErrors, "fsck-errors", "fsck: the root has findings of severity error (damaged revisions, gaps, key mismatches, bad proofs, unsafe or untrusted paths)"},
	{exitTimeout, "timeout", "wait, run --wait: the pair was still held when --timeout passed; nothing was taken"},
}

// refusalExit maps every refusal code to its exit code.
var refusalExit = map[claimstore.Code]exitCode{
	claimstore.AlreadyActive:     exitAlreadyActive,
	claimstore.UnsafeReplacement: exitUnsafeReplacement,
	claimstore.ForeignHost:       exitForeignHost,
}

// refusalDocs says what each refusal code means to an operator.
var refusalDocs = map[claimstore.Code]string{
	claimstore.AlreadyActive:     "a live or possibly live owner holds the key; wait for it to release, or run `claimctl classify` if its supervisor died",
	claimstore.UnsafeReplacement: "the key is held in a state nobody can prove over; read `claimctl show` and `claimctl log`, classify after a crash or reboot, fsck a damaged key",
	claimstore.ForeignHost:       "the key is held by a claim taken on another machine; classify or release it there",
}
