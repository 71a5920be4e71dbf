// Command mutate is the project's mutation test: it seeds small mistakes
// (mutants) into the code whose mistakes lose acknowledged revisions or free
// a live claim — the publish path, head probing and listing, fencing,
// classify, boot proofs, the trust chain and hostid's owner judging — and
// runs the tests against each. A mutant the tests fail on is killed; one
// they pass on survived, and is either a gap in the tests or an equivalent
// mutant (a change that cannot alter behaviour), which equivalent.txt lists
// with its reason.
//
// # Contract
//
// Exit status 0 when every mutant that ran was killed, did not compile, or
// is listed in equivalent.txt; 1 when any other mutant survived, when
// equivalent.txt names an id that no longer exists (the list went stale), or
// when the unmutated tests fail (then nothing can be judged); 2 on a usage
// error. Each survivor is printed with its id, file:line, what changed and a
// diff of the mutated lines. The last line is a summary: the score
// (killed / (killed + unlisted survivors)), how many mutants ran of how many,
// the stillborn, equivalent and survived counts, the runtime and the average
// time per mutant.
//
// The tree is never written: mutated sources live in a temporary directory
// and reach the go command through -overlay.
//
// # Targets and operators
//
// targets.go lists the files, functions ("Name" or "Recv.Name") and the test
// packages judging them. A listed function that no longer exists is an
// error. Only code inside the listed functions (function literals in them
// included) is mutated, by these operators:
//
//   - remove-call: drop a statement that is a call (an fsync, a hook, a
//     helper).
//   - remove-guard: drop an if statement without else whose body ends in a
//     return: a check, together with the call in its init statement (so a
//     sync of a parent, a publish, an ancestor check goes with it).
//   - negate: `cond` → `!(cond)` for if and for conditions and the cases of
//     a tagless switch; a lone == or != comparison is left to boundary,
//     which makes the same mutant.
//   - boundary: < ↔ <=, > ↔ >=, == ↔ != in comparisons that decide
//     something (not in a call's arguments or a literal, e.g. a message).
//   - and-or: && ↔ ||, likewise.
//   - swallow-error: in a function (or function literal) whose last result
//     is error, a return's error result → nil (an expression other than a
//     name is still evaluated, then dropped: the error is swallowed, the
//     call that made it still happens).
//   - swap: exchange two adjacent statements that are calls, assignments or
//     ifs with an init statement (a call and its check): this is how a
//     swapped publish order (session before seat, link before fsync) is
//     seeded.
//   - branch: continue ↔ break.
//
// Mutex calls (Lock, Unlock, RLock, RUnlock) are neither removed nor
// swapped: misplacing them changes only what the race detector sees, and
// these runs do not use it (it would multiply every test's time).
//
// # Mutant ids
//
// An id is package.func:operator:hash (claimstore.Store.step:swap:1a2b3c4d),
// the hash taken over the operator, the mutated code, its replacement, the
// first line of the statement holding it and the first line of the
// statement around that one, all with white space squashed. It names no file
// and no line, so moving a function to another file of its package keeps
// every id, as do re-indenting and edits elsewhere in the function; what
// changes an id is a change of the mutated statement itself. Sites that
// would share an id (the same statement twice in the same context: every
// "return nil, err" opened by an "if err != nil") add the hash of the
// statement before them (".hash"), and then, if still equal, "~n" in source
// order. The line, the site's ordinal k among its operator's sites and the
// description printed beside an id are for people.
//
// # Running
//
//	go run ./internal/mutate -list                  # print every mutant
//	go run ./internal/mutate -budget 0              # run all of them
//	go run ./internal/mutate -budget 8m -seed "$(git rev-parse HEAD)"
//	go run ./internal/mutate -only ID[,ID...]       # run some
//
// -seed shuffles the order, so that a budgeted run (CI) covers a different
// slice at each commit; without -seed mutants run in source order. -budget
// stops starting mutants after that long (0: run all); the summary says how
// many ran. -j runs that many mutants at once (default 2). -equivalent names
// the equivalent list (default internal/mutate/equivalent.txt); -json writes
// every result to a file; -v prints why a stillborn mutant did not compile;
// -cover=false runs every test of the packages for every mutant;
// -schema=false builds every mutant separately (slow).
//
// # How a mutant is run
//
// Building a package and its test binary per mutant costs seconds of
// compile and link each, which on two cores would make a full run take
// hours; so by default (-schema) each mutated package is built once as a
// mutant schema (schema.go): every target file rewritten with all its
// mutants compiled in, each behind a switch read from the environment
// (MUTATE_SCHEMA_ACTIVE=k), plus a small helper file, given to go test -c
// through -overlay. The rewrite is exact when a mutant is off (each
// expression is evaluated once, on one side of the switch), and mutant k
// switched on behaves as the file with only mutant k applied; a unit test
// (TestSchemaMatchesMutants) checks both on a snippet for every operator.
// Before any mutant runs, the schema's test binaries run every test with no
// mutant on: they must pass, as the unmutated tree does.
//
// A mutant that does not compile on its own (stillborn: a dropped check
// leaving a variable unused, a swap using a name before its declaration) is
// found by type-checking the package with that mutant alone (go/types, with
// the dependencies' export data from go list -export), counted apart, never
// a survivor, and left out of the schema. Per mutant, then, the schema's
// test binary runs in the package's directory, as go test would:
//
//	pkg.test -test.short -test.count=1 -test.failfast -test.timeout T -test.run TESTS
//
// with that mutant switched on. A test timeout counts as killed: a mutant
// that hangs the code (a negated loop condition) is caught by it. T is ten
// times what the selected tests took alone in the coverage run, at least
// 30 s, at most ten times the whole suite's unmutated time (-timeout sets it
// for every mutant). -schema=false instead builds each mutant with
// go build and go test -overlay (vet off: a mutant vet dislikes is not
// thereby caught by a test); it is the slow reference the schema must
// agree with.
//
// # Test selection by coverage
//
// Before the mutants, each test of each test package runs once, alone, with
// a coverage profile of the target packages (one build, then one process per
// test). A mutant is then tested only by the tests that executed the
// statement it is in (-test.run TESTS); a mutant no test executes survives
// at no cost, marked "no test executes this code". The coverage run is
// also the check that the unmutated tests pass. An expression is matched by
// its whole statement, a case expression by its whole switch and an else-if
// condition by its whole chain, since coverage blocks do not hold those. This
// cuts most mutants' test time to a fraction of the suite's. The tests each
// test package selects (for hostid, ./hostid then ./claimstore) run one
// package after the other, and the first that fails kills the mutant.
//
// # Environment and caveats
//
// The runs unset CI: with CI set, a test that cannot reach systemd or
// Node.js fails instead of skipping, and a missing component would read as a
// killed mutant. A test that skips does not kill. The unmutated tests must
// pass first, or the run stops. A flaky test can kill a mutant it should
// not; coverage taken from one run can miss a test that reaches the code
// only on some schedules, so a mutant only such a test kills may survive
// (run it with -only and -cover=false to check). The command line's tests
// (internal/cli) are not run: its end-to-end scripts build and run the
// claimctl binary (a schema binary would not reach them), and drive the
// same claimstore code that claimstore's own tests reach directly. Mutants of hostid are judged by
// hostid's and claimstore's tests. The race detector is not used (it would
// multiply every test's time), which is why mutex calls are not mutated.
package main
