package cli

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

const modulePath = "github.com/claimstore/claimstore"

// version and commit are set at link time by a packager (scripts/package:
// -ldflags "-X github.com/claimstore/claimstore/internal/cli.version=1.2.3
// -X github.com/claimstore/claimstore/internal/cli.commit=HASH"), where the
// build has no VCS stamp (-buildvcs=false, so that the bytes do not depend on
// the checkout's untracked files). By default they come from the build info:
// the module version, and the VCS revision `go build` stamps in a checkout.
var (
	version = ""
	commit  = ""
)

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// buildCommit is the commit claimctl was built from, "+dirty" when the
// checkout had changes, or "" when unknown (a build outside a checkout, or
// with -buildvcs=false and no -X).
func buildCommit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "+dirty"
	}
	return rev
}

var versionCmd = &command{
	name:    "version",
	args:    "[--json]",
	summary: "Print claimctl's version and the commit it was built from.",
	noRoot:  true,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		return func(e *env) error {
			j := versionJSON{Version: buildVersion(), Commit: buildCommit(), Module: modulePath, Go: runtime.Version()}
			if c.json {
				writeJSON(e.stdout, j)
				return nil
			}
			rev := j.Commit
			if rev == "" {
				rev = "unknown"
			}
			fmt.Fprintf(e.stdout, "claimctl %s (commit %s, %s, %s)\n", j.Version, rev, j.Module, j.Go)
			return nil
		}
	},
}

// helpTopics are the help pages that are not commands.
var helpTopics = map[string]func(io.Writer){
	"exit-codes": printExitCodes,
	"json":       printJSONHelp,
	"root":       printRootHelp,
}

var helpCmd = &command{
	name:       "help",
	args:       "[COMMAND | exit-codes | json | root]",
	summary:    "Print help: the command list, a command's usage, or a topic.",
	noRoot:     true,
	noJSON:     true,
	positional: true,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		return func(e *env) error {
			switch fs.NArg() {
			case 0:
				fmt.Fprint(e.stdout, mainUsage(helpWidth(e.stdout)))
				return nil
			case 1:
			default:
				return usagef("help takes one command or topic, not %d", fs.NArg())
			}
			name := fs.Arg(0)
			if cmd := lookupCommand(name); cmd != nil {
				cmd.printHelp(e.stdout)
				return nil
			}
			if t := helpTopics[name]; t != nil {
				t(e.stdout)
				return nil
			}
			return usagef("no command or help topic %s; run 'claimctl help' for the list", quotePrefix(name))
		}
	},
}

// mainIntro is the first paragraph of `claimctl help` and the man page's
// description.
const mainIntro = `claimctl is the operator tool of claimstore: crash-safe writer claims on
seats and sessions, kept as append-only revisions under a claim root.`

// mainGlobal says which flags every command takes and where the root is.
const mainGlobal = `Every command but help, completion, metrics and run takes --json (one JSON document on
standard output; NDJSON for classify --all) and, except version, --root DIR;
these two may also come before the command (claimctl --root DIR show ...),
not in both places. The root is --root, else $CLAIMSTORE_ROOT, else
/var/lib/claimstore for root and $XDG_STATE_HOME/claimstore (or
~/.local/state/claimstore) for others.`

// keysHelp says how keys are printed: the man page's description and
// `claimctl help` carry it, as REFERENCE.md does.
const keysHelp = `Keys are bytes and are never normalised (as in the reference: café written
with U+00E9 and cafe followed by U+0301 are two seats), so output prints them
so that two keys never look alike: each value is quoted with combining marks,
format characters and every space but U+0020 escaped (seat "cafe\u0301"), and
a key with any non-ASCII character is followed by the first 8 hex digits of
its hash (seat "café" (project "p", workspace "/w") [h:2c247a58]). --json
gives the values as stored.`

// runExitNote follows the exit code table wherever it is printed: run's
// own codes beside its command's.
const runExitNote = "run exits with its command's own status once the claim is released (126 or 127 when the command could not be executed); a command may exit with any of the codes above, and run --conflict-exit-code N makes run's own outcomes exit N instead."

func mainUsage(width int) string {
	var b strings.Builder
	b.WriteString(wrapDoc(mainIntro, width) + "\n\n")
	b.WriteString("usage: claimctl [--root DIR] [--json] COMMAND [flags]\n\nCommands:\n")
	var rows [][]string
	for _, c := range commands {
		rows = append(rows, []string{c.name, c.summary})
	}
	table(&b, "  ", rows, width)
	b.WriteString("\n" + wrapDoc(mainGlobal, width) + "\n\n")
	b.WriteString(wrapDoc(keysHelp, width) + "\n\n")
	printExitCodesWidth(&b, width)
	b.WriteString("\n" + wrapDoc(`Run 'claimctl help COMMAND' for a command's flags, 'claimctl help json' for
the JSON field names, 'claimctl help root' for the claim root.`, width) + "\n")
	return b.String()
}

func printExitCodes(w io.Writer) { printExitCodesWidth(w, helpWidth(w)) }

func printExitCodesWidth(w io.Writer, width int) {
	fmt.Fprintln(w, "Exit codes:")
	var rows [][]string
	for _, x := range exitCodes {
		rows = append(rows, []string{strconv.Itoa(int(x.Code)), x.Name, x.Meaning})
	}
	table(w, "  ", rows, width)
	fmt.Fprintf(w, "\n%s\n", wrapDoc(runExitNote, width))
	fmt.Fprintln(w, "\nRefusal codes:")
	rows = nil
	for _, code := range claimstore.Codes {
		rows = append(rows, []string{string(code), fmt.Sprintf("exit %d", refusalExit[code]), refusalDocs[code]})
	}
	table(w, "  ", rows, width)
}

// jsonFields returns the json names of a struct's fields, in order.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !t.Field(i).IsExported() {
			continue
		}
		if name == "" {
			name = t.Field(i).Name
		}
		out = append(out, name)
	}
	return out
}

func printJSONHelp(w io.Writer) {
	width := helpWidth(w)
	fmt.Fprintln(w, `JSON documents and their fields (stable names; see REFERENCE.md):`)
	for _, t := range jsonTypes {
		fmt.Fprintf(w, "\n%s\n", wrapLines(t.Name+" — "+t.Where, 0, 4, width))
		var rows [][]string
		for _, f := range jsonFields(t.Value) {
			rows = append(rows, []string{f, t.Fields[f]})
		}
		table(w, "  ", rows, width)
	}
}

func printRootHelp(w io.Writer) { fmt.Fprintln(w, wrapDoc(rootHelp, helpWidth(w))) }

const rootHelp = `The claim root is the directory that holds every key's history:

  <root>/seat/<hash>/r0000000001.json         revisions of a seat key
  <root>/session/<hash>/r0000000001.json      revisions of a session key
  <root>/proofs/boot-<24 hex>.json            boot proofs classify issued
  <root>/status/classify-all-<machine>.json   the last classify --all, for metrics

It is chosen by --root, else $CLAIMSTORE_ROOT, else /var/lib/claimstore when
running as root and $XDG_STATE_HOME/claimstore (or ~/.local/state/claimstore)
otherwise. A relative --root is resolved against the working directory, and
every command that writes prints the root it wrote to. A relative
$CLAIMSTORE_ROOT is refused (exit 2): the environment outlives the directory it
was set in, so it would name another root from every working directory, and
two supervisors started in two directories would both win the same pair.

A root is created only where nothing else lives: the first write creates it,
mode 0700, when it does not exist, and writes into an existing directory only
when it is empty, holds lost+found alone, or is a claim root already; any other
directory (/etc, a home directory) is refused (exit 1, nothing written). For
the default root, claimctl also creates its missing parents (0700). A root
given by --root or $CLAIMSTORE_ROOT must have an existing parent. A root that is a symlink, not a
directory, or writable by other users is refused. Commands that only read
(show, log, classify --dry-run) create nothing; on a root that does not exist
they see no revisions. fsck and classify --all fail (exit 1) on a missing root
named by --root or $CLAIMSTORE_ROOT, a likely typo, and report an empty root
for the default one. They refuse a directory that holds entries and none of
seat/, session/, proofs/, status/ or archive/: it is not a claim root.

A root may also be kept in an etcd v3 cluster, etcd://host:2379[,host:2379...]/prefix,
with the same layout and record bytes under the key prefix. claimctl links no
etcd client, to keep its start-up short: it hands a command on an etcd root,
unchanged, to claimctl-etcd (the same command line with the client linked),
found beside claimctl or on $PATH, which replaces its process; without it,
the command fails (exit 1) and says how to install it.

Claims record this machine's id (/etc/machine-id). When it cannot be read,
the commands that judge or take claims fail and say how to fix it. If it
changed, claims taken under the old id read as another machine's: put the old
id back, classify or release them, then install the new one (REFERENCE.md).`
