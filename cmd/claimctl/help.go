package main

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/claimstore/claimstore/claimstore"
)

const modulePath = "github.com/claimstore/claimstore"

// version is set at link time (-ldflags "-X main.version=v1.2.3"); by
// default it is the module version from the build info.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

var versionCmd = &command{
	name:    "version",
	args:    "[--json]",
	summary: "Print claimctl's version.",
	noRoot:  true,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		return func(e *env) error {
			j := versionJSON{Version: buildVersion(), Module: modulePath, Go: runtime.Version()}
			if c.json {
				writeJSON(e.stdout, j)
				return nil
			}
			fmt.Fprintf(e.stdout, "claimctl %s (%s, %s)\n", j.Version, j.Module, j.Go)
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
	positional: true,
	define: func(fs *flag.FlagSet, c *common) func(*env) error {
		return func(e *env) error {
			switch fs.NArg() {
			case 0:
				fmt.Fprint(e.stdout, mainUsage())
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
			return usagef("no command or help topic %q; run 'claimctl help' for the list", name)
		}
	},
}

func mainUsage() string {
	var b strings.Builder
	b.WriteString(`claimctl is the operator tool of claimstore: crash-safe writer claims on seats
and sessions, kept as append-only revisions under a claim root.

usage: claimctl [--root DIR] [--json] COMMAND [flags]

Commands:
`)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	b.WriteString(`
Every command takes --json (one JSON document on standard output; NDJSON for
classify --all) and, except version and help, --root DIR; these two may also
come before the command (claimctl --root DIR show ...), not in both places. The root is --root,
else $CLAIMSTORE_ROOT, else /var/lib/claimstore for root and
$XDG_STATE_HOME/claimstore (or ~/.local/state/claimstore) for others.

`)
	printExitCodes(&b)
	b.WriteString(`
Run 'claimctl help COMMAND' for a command's flags, 'claimctl help json' for the
JSON field names, 'claimctl help root' for the claim root.
`)
	return b.String()
}

func printExitCodes(w io.Writer) {
	fmt.Fprintln(w, "Exit codes:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, x := range exitCodes {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", x.Code, x.Name, x.Meaning)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRefusal codes:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, code := range claimstore.Codes {
		fmt.Fprintf(tw, "  %s\texit %d\t%s\n", code, refusalExit[code], refusalDocs[code])
	}
	tw.Flush()
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
	fmt.Fprintln(w, `JSON documents and their fields (stable names; see REFERENCE.md):`)
	for _, t := range jsonTypes {
		fmt.Fprintf(w, "\n%s — %s\n", t.Name, t.Where)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, f := range jsonFields(t.Value) {
			fmt.Fprintf(tw, "  %s\t%s\n", f, t.Fields[f])
		}
		tw.Flush()
	}
}

func printRootHelp(w io.Writer) {
	fmt.Fprint(w, `The claim root is the directory that holds every key's history:

  <root>/seat/<hash>/r0000000001.json      revisions of a seat key
  <root>/session/<hash>/r0000000001.json   revisions of a session key
  <root>/proofs/boot-<24 hex>.json         boot proofs classify issued

It is chosen by --root, else $CLAIMSTORE_ROOT, else /var/lib/claimstore when
running as root and $XDG_STATE_HOME/claimstore (or ~/.local/state/claimstore)
otherwise. The first write creates it, mode 0700; for the default root,
claimctl also creates its missing parents (0700). A root given by --root or
$CLAIMSTORE_ROOT must have an existing parent. A root that is a symlink, not a
directory, or writable by other users is refused. Commands that only read
(show, log, classify --dry-run) create nothing; on a root that does not exist
they see no revisions. fsck and classify --all fail (exit 1) on a missing root
named by --root or $CLAIMSTORE_ROOT, a likely typo, and report an empty root
for the default one. They refuse a directory that holds entries and none of
seat/, session/ or proofs/: it is not a claim root.

Claims record this machine's id (/etc/machine-id). When it cannot be read,
the commands that judge or take claims fail and say how to fix it. If it
changed, claims taken under the old id read as another machine's: put the old
id back, classify or release them, then install the new one (REFERENCE.md).
`)
}
