// Package fuzz holds the store's native Go fuzz targets; it has no code of
// its own. Each target runs its seed corpus (testdata/fuzz/<Target>/ and
// the f.Add seeds) in a plain `go test ./fuzz/`.
//
//   - FuzzDecodeRecord: DecodeRecord never panics, and a record it accepts
//     re-marshals to bytes that decode to the same record (and marshal to
//     the same bytes).
//   - FuzzHead: a key directory built from the input (revision names,
//     junk names, temporaries, directories and symlinks under revision
//     names, torn, foreign and valid records) on crashfs; Head, Revisions
//     and Pair never panic, agree with a listing of the directory, and
//     never read a key as free when its highest revision holds it.
//   - FuzzKeyJSON: Key.JSON against an independent implementation of
//     ECMAScript JSON.stringify's string quoting, and Key.Validate against
//     the rules (non-empty, valid UTF-8, no NUL, at most MaxKeyValueLen).
//   - FuzzModel: a rapid state machine (rapid.MakeFuzz) of acquires,
//     advances, releases and classifications by several claims over
//     crashfs, with power cuts at arbitrary filesystem calls, checking the
//     invariants after every step.
//
// To fuzz one target for a bounded time (as CI does):
//
//	go test ./fuzz -run '^$' -fuzz '^FuzzDecodeRecord$' -fuzztime 20s
//	go test ./fuzz -run '^$' -fuzz '^FuzzHead$' -fuzztime 20s
//	go test ./fuzz -run '^$' -fuzz '^FuzzKeyJSON$' -fuzztime 20s
//	go test ./fuzz -run '^$' -fuzz '^FuzzModel$' -fuzztime 20s
//
// New failing inputs land in testdata/fuzz/<Target>/; commit them with the
// fix. `go test ./fuzz -run TestSeedCorpus -fuzz.writecorpus` regenerates
// the committed seeds (from testdata/reference's revision files and the
// store's own records, and FuzzModel's seed-* entries).
//
// FuzzModel's input is rapid's random bitstream, eight bytes a draw: an
// input that runs out before the run ends makes rapid report invalid data
// and skip it, having checked nothing past that point. Its seeds are
// therefore pseudo-random inputs cut to exactly the bytes a run of 20 to
// 30 steps draws, chosen so that together they take every action to every
// outcome (acquired, refused, cut by a power failure, each classify
// outcome, ...). TestModelCorpus runs each committed entry, logs what it
// exercised (-v), and fails if one was skipped or an outcome is left out;
// an input the fuzzer found that skips once its bug is fixed is padded
// with bytes until it runs to its end.
//
// To run longer than CI does: the fuzz targets take any -fuzztime
// (`go test ./fuzz -run '^$' -fuzz '^FuzzModel$' -fuzztime 10m`); the rapid
// properties take rapid's flags, -rapid.checks N (runs, 100 by default)
// and -rapid.steps N (steps a run, 30 by default): `go test ./fuzz -run
// TestModel -rapid.checks 10000`, `go test ./claimstore -run
// TestClaimStateMachine -rapid.checks 10000 -rapid.steps 100`. The other
// randomized claimstore tests take -stress N, multiplying their rounds.
// CI keeps all of them at their defaults, and fuzzes each target for 20s.
//
// FuzzHead checks gapped directories too: Head may stop short below a gap
// only on a held revision, and never reads a gapped key free.
package fuzz
