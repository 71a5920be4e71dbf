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
// store's own records).
//
// FuzzHead checks gapped directories too: Head may stop short below a gap
// only on a held revision, and never reads a gapped key free.
package fuzz
