package main

// A target names the functions of one file that mutants are seeded in, and
// the packages whose tests must kill them.
type target struct {
	// File is the path of a Go source file relative to the module root,
	// slash-separated.
	File string
	// Funcs are the functions to mutate: "Name" for a function,
	// "Recv.Name" for a method (the receiver's type name without '*').
	// A name that no longer exists is an error, so that a rename cannot
	// silently shrink the mutation run.
	Funcs []string
	// Tests are the packages (go test patterns, relative to the module
	// root) run against each mutant of the file.
	Tests []string
}

// claimstoreTests is where claimstore's mutants are judged. The command
// line's tests (internal/cli) are left out: its end-to-end scripts build
// and run the claimctl binary, which the schema's test binary does not
// reach, for logic that claimstore's own tests exercise directly; see
// doc.go.
var claimstoreTests = []string{"./claimstore"}

// dirbackendTests judge the directory backend's mutants: its own tests and
// the store's, whose behavioural suite runs on it.
var dirbackendTests = []string{"./claimstore/dirbackend", "./claimstore"}

// targets is the publish path, head and listing logic, fencing, classify,
// proofs, the trust chain and hostid's owner judging: the code whose
// mistakes lose acknowledged revisions or free a live claim.
var targets = []target{
	{
		File: "claimstore/dirbackend/backend.go",
		Funcs: []string{
			"Backend.Head", "Backend.CountedHead", "Backend.readHead", "Backend.probe", "Backend.IsOwnHead", "Backend.census", "climb",
			"Backend.SyncWalk", "Backend.List", "Backend.checkKeyDir", "usable", "Backend.checkDir",
			"Backend.WriteProof", "Backend.ReadProof",
			"Backend.syncEach", "Backend.dir", "plainName",
		},
		Tests: dirbackendTests,
	},
	{
		File: "claimstore/dirbackend/publish.go",
		Funcs: []string{
			"Backend.makeDirs", "Backend.aboveKeys", "Backend.makeDirsIn", "Backend.makeDir", "Backend.makeRoot", "Backend.fsyncDirs",
			"Backend.owedParents", "Backend.runAtOnce", "Backend.recordSynced",
			"Backend.prepare", "Backend.stage", "prepared.syncTemp", "Backend.PrepareBatch", "Backend.stageRequest", "Backend.syncBatch", "tempsSynced",
			"callFences", "failFenced", "Backend.submitted", "hasFence", "liveTemps",
			"prepared.Commit", "prepared.link", "prepared.finish", "Backend.Sync", "Backend.writeExclusive",
			"Backend.fsyncOwed", "Backend.submittedLinks", "Backend.syncOwed", "prepared.linkSyncs", "prepared.closeLinked",
			"Backend.syncHeadFile", "Backend.owedCalls",
		},
		Tests: dirbackendTests,
	},
	{
		// Prune's tombstones, a batch at a time: a mistake here links a
		// revision whose bytes a crash can lose, or over a head that moved.
		File: "claimstore/dirbackend/publishbatch.go",
		Funcs: []string{
			"Backend.PublishBatch", "Backend.publishPart", "Backend.syncStaged", "Backend.syncLinked", "Backend.syncFS", "eachAtOnce",
		},
		Tests: dirbackendTests,
	},
	{
		File: "claimstore/dirbackend/trust.go",
		Funcs: []string{
			"Backend.readFile", "checkChain", "ancestorProblem", "Backend.trustInfo",
		},
		Tests: dirbackendTests,
	},
	{
		File: "claimstore/head.go",
		Funcs: []string{
			"Store.head", "Store.probeHead", "Store.probeCounted", "Store.censusWith", "Store.headAt", "Store.headOf", "Store.verifyHeadProof",
			"Store.listedUpTo", "Store.noteListing", "dense", "gapsOf",
			"Head.Held", "Head.State", "Pair.Held", "Pair.State", "Store.Refusal",
		},
		Tests: claimstoreTests,
	},
	{
		File: "claimstore/step.go",
		Funcs: []string{
			"Store.fenced", "Store.fencedOwn",
			"Store.publishAfter", "preparing.commit", "Store.noteOwn", "Store.prepareStep", "failedPrep", "preparing.encodeOne", "preparing.encode",
			"Store.checkSize", "Record.sizeBound",
			"Store.step", "Store.Acquire", "Store.Advance", "Store.checkReleaseProof",
		},
		Tests: claimstoreTests,
	},
	{
		File: "claimstore/classify.go",
		Funcs: []string{
			"Store.finish", "Store.completeMovedRelease",
			"bootEvidence", "Store.judgeOwner", "Store.syncHeads", "sameOutcome",
			"spawnMarkerOf",
		},
		Tests: claimstoreTests,
	},
	{
		File: "claimstore/table.go",
		Funcs: []string{
			"Store.classifyOnce", "judgement.free", "judgement.refused", "judgement.foreign",
			"judgement.damaged", "judgement.movedRelease", "judgement.twoClaims",
			"judgement.adopted", "judgement.ownerNotGone", "judgement.otherPair",
			"judgement.earlierBoot", "judgement.cutRelease", "judgement.nothingRan",
			"judgement.mayRun",
		},
		Tests: claimstoreTests,
	},
	{
		File:  "claimstore/resume.go",
		Funcs: []string{"Store.Resume", "Store.FinishStep", "Record.Satisfies", "sameContent"},
		Tests: claimstoreTests,
	},
	{
		File:  "claimstore/proof.go",
		Funcs: []string{"Store.IssueBootProof", "Store.VerifyProof", "Store.ReadBootProof"},
		Tests: claimstoreTests,
	},
	{
		// What a revision's bytes are: the reference must read them as
		// this store wrote them, and a key's directory is the hash of
		// its JSON.
		File:  "claimstore/record.go",
		Funcs: []string{"Record.Marshal", "Record.appendBody", "appendTail", "compact", "encodeString", "proofJSON", "Proof.appendJSON", "Host.appendJSON", "timestamp", "appendDigits"},
		Tests: claimstoreTests,
	},
	{
		// Every revision's file name: a mistake here publishes under a
		// name no reader looks for.
		File:  "claimstore/storage/storage.go",
		Funcs: []string{"RevisionName"},
		Tests: []string{"./claimstore/storage"},
	},
	{
		File:  "claimstore/key.go",
		Funcs: []string{"appendJSString"},
		Tests: claimstoreTests,
	},
	{
		File:  "claimstore/all.go",
		Funcs: []string{"Store.ClassifyAll", "Summary.count", "Store.classifyPairs"},
		Tests: claimstoreTests,
	},
	{
		File:  "claimstore/walk.go",
		Funcs: []string{"Store.keyInfo", "Store.pairKeys", "KeyInfo.Held", "Store.readKeys", "inParallel", "slimKeyInfo", "slimFreeHeads"},
		Tests: claimstoreTests,
	},
	{
		// Retention: what prune removes, keeps, batches, tombstones and
		// compacts. A mistake here removes history a decision rests on.
		File: "claimstore/prune.go",
		Funcs: []string{
			"Store.Prune", "Store.collectFences", "oldEnough", "Store.compactionOf",
			"Store.sessionBlock", "Store.pruneBatch", "compactAll", "Store.publishTombstones",
			"Store.reportDone", "Store.publishTombstone", "slimForPrune",
			"Store.rereadHeads", "Store.publishTombstoneBatch", "tombstoneOf", "tombstoneTooLarge",
		},
		Tests: claimstoreTests,
	},
	{
		// The archive's reads: a mistake here archives another revision,
		// or loses one, before it is removed.
		File:  "claimstore/archive.go",
		Funcs: []string{"archiver.plan", "segment.start", "archiving.wait", "segment.encodeRevisions"},
		Tests: claimstoreTests,
	},
	{
		// Prune's walk: which sessions it pairs and which it keeps plain.
		// A mistake here pairs a key otherwise than a whole walk would.
		File:  "claimstore/prune_walk.go",
		Funcs: []string{"Store.pruneWalk", "plainOf", "plainSession.candidate", "plainSession.key"},
		Tests: claimstoreTests,
	},
	{
		File: "claimstore/dirbackend/prune.go",
		Funcs: []string{
			"Backend.readBase", "Backend.Base", "Backend.Census", "guarded.Commit",
			"Backend.Compact", "Backend.stageBase", "Backend.installBase", "Backend.RemoveKeys", "Backend.removeKeys",
			"Backend.renameAway", "Backend.syncKinds", "Backend.Sweep", "Backend.deleteTree",
			"Backend.checkRemoval", "Backend.headStill", "Backend.HeadAt", "Backend.deleteTrash", "Backend.ListFrom", "Backend.lockPrune", "processLock", "Backend.PrepareOver",
			"Backend.NeedsTombstone", "prepared.checkPrev", "randomHex", "Backend.RemoveKey", "Backend.forget", "Backend.ArchiveDir",
		},
		Tests: dirbackendTests,
	},
	{
		File:  "hostid/hostid.go",
		Funcs: []string{"Judge", "parseStat"},
		// claimstore judges owners through hostid: its classify tests
		// are part of what must notice a wrong judgement.
		Tests: []string{"./hostid", "./claimstore"},
	},
	{
		// Reads that write no access time: a mistake here fails every
		// read of a root whose files are another user's, or lets reads
		// journal an inode each again.
		File:  "internal/safefile/safefile.go",
		Funcs: []string{"openRead", "OpenRead", "SyncFile", "OpenDirFD"},
		Tests: []string{"./internal/safefile", "./claimstore/vfs", "./claimstore/dirbackend"},
	},
	{
		// A revision another process linked, fsynced by name before a
		// decision on it: a mistake here fsyncs nothing, or waits on a
		// FIFO planted under the name.
		File:  "claimstore/vfs/vfs.go",
		Funcs: []string{"OSFS.SyncFile", "SyncDirsEach"},
		Tests: []string{"./claimstore/vfs", "./claimstore/dirbackend"},
	},
	{
		// A batch's fsyncs submitted at once: a mistake here reports an
		// fsync done that was not, or another's result in its place.
		File: "claimstore/vfs/uring_linux.go",
		Funcs: []string{
			"seccompFiltered", "getRing", "putRing", "newRing", "setupCall", "ring.enter", "ring.fsync", "ring.reap", "NewSyncBatch", "SyncBatch.Sync", "ring.fsyncAll", "ringsFromEnv",
			"OSFS.SyncDirs", "fsyncFDs", "fsyncFD",
		},
		Tests: []string{"./claimstore/vfs", "./claimstore/dirbackend"},
	},
}
