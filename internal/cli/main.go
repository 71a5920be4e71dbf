package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/claimstore/claimstore/claimstore"
)

// Main runs claimctl with the process's arguments, standard streams and
// environment, and returns its exit status: cmd/claimctl and
// cmd/claimctl-etcd are each a main that calls it.
//
// A nil opts is claimctl's own configuration, without the etcd client (see
// Options): a command whose root is an etcd root is then handed whole to
// the claimctl-etcd program, which replaces this process (execve) with the
// same arguments and environment — before anything was read from or written
// to that root, and before anything was written to standard output.
//
// A standard output closed when claimctl started is not told apart from
// /dev/null: the Go runtime opens /dev/null read-write in its place
// (runtime.checkfds), exactly as Python's subprocess.DEVNULL and Node.js's
// "ignore" do for a child, and supervisors start claimctl that way. Output
// sent to /dev/null is the caller's choice.
func Main(opts *Options) int {
	return int(run(opts, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, true))
}

// command is one subcommand of claimctl.
type command struct {
	name    string
	args    string // the synopsis after the name
	summary string // one line
	doc     string // paragraphs after the synopsis in `claimctl help NAME`
	noRoot  bool   // the command does not take --root
	noJSON  bool   // the command does not take --json (it prints only text)
	// positional: the command takes words besides flags (help's topic,
	// completion's shell); every other command takes values by flag only.
	positional bool
	aliases    []string
	// define registers the command's own flags on fs and returns the
	// function that runs it once the flags are parsed.
	define func(fs *flag.FlagSet, c *common) func(e *env) error
}

// common are the flags every command has.
type common struct {
	conn     connFlags // how to reach an etcd root
	rootFlag string
	rootSet  bool
	json     bool
	cmd      *command
	set      map[string]bool // the flags given on the command line
}

// commands lists the subcommands in the order help shows them.
var commands []*command

func init() {
	commands = []*command{
		runCmd, waitCmd,
		listCmd, showCmd, logCmd, classifyCmd, fsckCmd, pruneCmd, metricsCmd,
		decommissionCmd, acquireCmd, advanceCmd, releaseCmd, copyCmd,
		versionCmd, helpCmd, completionCmd,
	}
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
		for _, a := range c.aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// run runs claimctl with the given arguments and returns its exit code.
//
// Standard output goes through an outWriter: a write that fails (a full
// disk behind `> file`, /dev/full, a closed descriptor) fails the command
// with exit 1 and a "write error" on standard error, as git and coreutils
// do; an acquire whose claim id never reached its caller must not exit 0.
// A broken pipe keeps its convention: the Go runtime kills the process with
// SIGPIPE on EPIPE on file descriptor 1 (when SIGPIPE is not ignored), as
// `claimctl log … | head` expects.
//
// delegate says that an etcd root may be handed to claimctl-etcd by
// replacing the process: only Main, which owns the process, sets it.
func run(opts *Options, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, delegate bool) exitCode {
	if opts == nil {
		opts = &Options{}
	}
	out := &outWriter{w: stdout}
	e := &env{ctx: context.Background(), stdin: stdin, stdout: out, stderr: stderr, getenv: getenv, opts: opts, args: args, delegate: delegate}
	code := run1(e, args)
	if out.err != nil {
		name := e.cmdName
		if name == "" {
			name = "claimctl"
		} else {
			name = "claimctl " + name
		}
		msg := fmt.Sprintf("%s: write error: standard output: %v", name, out.err)
		if e.done != "" {
			msg += "; the output was lost, but the command's work was done: " + e.done
		}
		fmt.Fprintln(stderr, msg)
		return exitError
	}
	return code
}

// globalFlag is a flag given before the command.
type globalFlag struct{ name, value string }

type globalFlags []globalFlag

func (g globalFlags) names() []string {
	var out []string
	for _, f := range g {
		out = append(out, "--"+f.name)
	}
	return out
}

// globalFlagNames are the flags accepted before the command: the common
// flags, which mean the same for every command.
var globalFlagNames = map[string]bool{"root": true, "json": true, "cacert": true, "cert": true, "key": true, "user": true, "password": true, "dial-timeout": true, "command-timeout": true}

// parseGlobal takes the flags before the command: --root DIR, --root=DIR,
// --json (one or two dashes). -h, --help and --version are left for the
// command switch. A flag given twice before the command is a usage error.
func parseGlobal(args []string) (globalFlags, []string, error) {
	var g globalFlags
	seen := map[string]bool{}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		a := args[0]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case a == "--":
			return g, args[1:], nil
		case name == "h" || name == "help" || name == "version":
			return g, args, nil
		case !globalFlagNames[name]:
			return nil, nil, fmt.Errorf("flag %s before the command is not a global flag (only --root, --json and the etcd connection flags are); put it after the command", quotePrefix(a))
		case seen[name]:
			return nil, nil, fmt.Errorf("--%s is given twice before the command", name)
		case name == "json" && !hasValue:
			value = "true"
		case name != "json" && !hasValue:
			if len(args) < 2 {
				return nil, nil, fmt.Errorf("flag needs an argument: %s", a)
			}
			value = args[1]
			args = args[1:]
		}
		seen[name] = true
		g = append(g, globalFlag{name, value})
		args = args[1:]
	}
	return g, args, nil
}

// outWriter remembers the first error writing standard output, and writes
// nothing after it.
type outWriter struct {
	w     io.Writer
	err   error
	wrote bool // something was written (or tried): too late to hand over
}

func (o *outWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	o.wrote = true
	n, err := o.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		o.err = err
	}
	return n, err
}

func run1(e *env, args []string) exitCode {
	stdout, stderr := e.stdout, e.stderr
	// Global flags may come before the command, as git, systemctl and
	// etcdctl accept: claimctl --root DIR show …
	global, args, err := parseGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "claimctl: %v\nRun 'claimctl help' for usage.\n", err)
		return exitUsage
	}
	if len(args) == 0 {
		if len(global) > 0 {
			fmt.Fprintf(stderr, "claimctl: a command must follow %s\n", strings.Join(global.names(), " "))
		}
		fmt.Fprint(stderr, mainUsage(helpWidth(stderr)))
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage(helpWidth(stdout)))
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	cmd := lookupCommand(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "claimctl: unknown command %s\nRun 'claimctl help' for the list of commands.\n", quotePrefix(name))
		return exitUsage
	}
	e.cmdName = cmd.name
	fs, c, runf := cmd.flags()
	if err := twiceFlag(fs, args[1:]); err != nil {
		return report(e, c, err)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cmd.printHelp(stdout)
			return exitOK
		}
		if msg := badFlagValue(fs, err); msg != "" {
			return report(e, c, usageErr{msg})
		}
		return report(e, c, usageErr{dashFlagErr(err.Error())})
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	for _, g := range global {
		if c.set[g.name] {
			return report(e, c, usagef("--%s is given both before and after the command; give it once", g.name))
		}
		if fs.Lookup(g.name) == nil {
			return report(e, c, usagef("--%s: %s takes no such flag", g.name, cmd.name))
		}
		if err := fs.Set(g.name, g.value); err != nil {
			return report(e, c, usageErr{flagValueMsg(fs.Lookup(g.name), g.value, err.Error())})
		}
		c.set[g.name] = true
	}
	c.rootSet = c.set["root"]
	e.conn = c.conn
	if fs.NArg() > 0 && !cmd.positional {
		return report(e, c, usagef("unexpected argument %s: every value is given by a flag", quotePrefix(fs.Arg(0))))
	}
	return report(e, c, runf(e))
}

// flags returns the command's flag set, its common flags and its runner.
func (cmd *command) flags() (*flag.FlagSet, *common, func(*env) error) {
	fs := flag.NewFlagSet("claimctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c := &common{cmd: cmd}
	if !cmd.noRoot {
		fs.StringVar(&c.rootFlag, "root", "", "the claim `dir`ectory, or an etcd:// URL for a root in etcd (default: $"+envRoot+", else /var/lib/claimstore for root, $XDG_STATE_HOME/claimstore or ~/.local/state/claimstore for others)")
		registerConnFlags(fs, &c.conn)
	}
	if !cmd.noJSON {
		fs.BoolVar(&c.json, "json", false, "write one JSON document (NDJSON for classify --all) instead of text")
	}
	runf := cmd.define(fs, c)
	return fs, c, runf
}

// badFlagValue rewrites the flag package's `invalid value "5" for flag
// -timeout: parse error` to say what the flag accepts, and to quote at
// most a bounded prefix of the value (a value may be megabytes long), or
// returns "" when err is not about a value.
func badFlagValue(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "invalid value ")
	if !ok {
		return ""
	}
	quoted, rest, ok := strings.Cut(rest, " for flag -")
	if !ok {
		return ""
	}
	name, reason, _ := strings.Cut(rest, ": ")
	f := fs.Lookup(strings.TrimLeft(name, "-"))
	if f == nil {
		return ""
	}
	value, uerr := strconv.Unquote(quoted)
	if uerr != nil {
		value = quoted
	}
	return flagValueMsg(f, value, reason)
}

// flagValueMsg says what is wrong with value as f's value, and what f
// takes, quoting a bounded prefix of the value.
func flagValueMsg(f *flag.Flag, value, reason string) string {
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return fmt.Sprintf("%s %s: not a duration: give a number with a unit, such as 5s, 2m or 1h30m (units: ms, s, m, h)", flagDash(f.Name), quotePrefix(value))
		case uint64, uint, int, int64:
			return fmt.Sprintf("%s %s: not a whole number", flagDash(f.Name), quotePrefix(value))
		case bool:
			return fmt.Sprintf("%s %s: want true or false (or the flag alone for true)", flagDash(f.Name), quotePrefix(value))
		}
	}
	return fmt.Sprintf("%s %s: %s", flagDash(f.Name), quotePrefix(value), reason)
}

// twiceFlag returns, for arguments the flag set will parse, the first
// flag given twice, unless it is repeatable (--set): one value per flag,
// and a second one is a usage error rather than a silent replacement of the
// first (--session x --session y would otherwise act on y). It reads the
// arguments as the flag package does: "--name=value", a bool flag alone, or
// another flag followed by its value; it stops at "--" and at the first
// word that is not a flag.
func twiceFlag(fs *flag.FlagSet, args []string) error {
	seen := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return nil
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			return nil // the parse says what is wrong with it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return nil
			}
			i++
			value = args[i]
		}
		if _, repeatable := f.Value.(setFlags); repeatable {
			continue
		}
		if first, dup := seen[name]; dup {
			return usagef("%s is given twice (%s, then %s): give it once", flagDash(name), quotePrefix(first), quotePrefix(value))
		}
		seen[name] = value
	}
	return nil
}

// printHelp writes the command's usage: synopsis, description and flags,
// wrapped to the terminal's width (80 columns when w is not a terminal).
func (cmd *command) printHelp(w io.Writer) {
	width := helpWidth(w)
	fmt.Fprintf(w, "%s\n\n%s\n", wrapLines("usage: claimctl "+cmd.name+" "+cmd.args, 0, 6, width), wrapLines(cmd.summary, 0, 0, width))
	if len(cmd.aliases) > 0 {
		fmt.Fprintf(w, "Alias: %s.\n", strings.Join(cmd.aliases, ", "))
	}
	if cmd.doc != "" {
		fmt.Fprintf(w, "\n%s\n", wrapDoc(cmd.doc, width))
	}
	fs, _, _ := cmd.flags()
	var rows [][]string
	fs.VisitAll(func(f *flag.Flag) {
		head, usage := flagHelp(f)
		rows = append(rows, []string{head, usage})
	})
	if len(rows) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		table(w, "  ", rows, width)
	}
}

// usageErr is a bad command line: exit 2, nothing touched.
type usageErr struct{ msg string }

func (u usageErr) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageErr{fmt.Sprintf(format, a...)} }

// exitErr ends a command with a given code. When msg is empty, the command
// has already said everything on its output.
type exitErr struct {
	code exitCode
	msg  string
}

func (x exitErr) Error() string { return x.msg }

// errorJSON is the document --json writes to standard output when a command
// fails after its flags were parsed.
type errorJSON struct {
	Error errorBodyJSON `json:"error"`
}

type errorBodyJSON struct {
	Exit    int       `json:"exit"`
	Kind    string    `json:"kind"` // usage, refusal, error
	Code    string    `json:"code,omitempty"`
	Message string    `json:"message"`
	Reason  string    `json:"reason,omitempty"`
	Hint    string    `json:"hint,omitempty"`
	ClaimID string    `json:"claimId,omitempty"`
	Keys    []keyJSON `json:"keys,omitempty"`
	Command string    `json:"command"`
	Root    string    `json:"root,omitempty"`
	Cause   *string   `json:"cause,omitempty"`
	// A step cut between its keys: what was published, what was not, and
	// the command that finishes it.
	Published   *publishedJSON `json:"published,omitempty"`
	Unpublished *publishedJSON `json:"unpublished,omitempty"`
	Finish      string         `json:"finish,omitempty"`
}

// report turns a command's error into its message and exit code.
func report(e *env, c *common, err error) exitCode {
	if err == nil {
		return exitOK
	}
	name := c.cmd.name
	if errors.Is(err, claimstore.ErrRecordTooLarge) {
		// Too much given on the command line (--set): a usage error, and
		// the store published nothing.
		err = usageErr{err.Error()}
	}
	var rm remapped
	if errors.As(err, &rm) {
		// Reported as the error it wraps, exiting the code asked for.
		report(e, c, rm.err)
		return rm.code
	}
	var st cmdStatus
	if errors.As(err, &st) {
		return st.code
	}
	var (
		ue  usageErr
		xe  exitErr
		ref *claimstore.Refusal
	)
	body := errorBodyJSON{Command: name, Message: err.Error()}
	code := exitError
	switch {
	case errors.As(err, &ue):
		code, body.Kind = exitUsage, "usage"
		fmt.Fprintf(e.stderr, "claimctl %s: %s\nRun 'claimctl help %s' for usage.\n", name, ue.msg, name)
	case errors.As(err, &xe):
		if xe.msg == "" {
			return xe.code
		}
		code, body.Kind = xe.code, "error"
		fmt.Fprintf(e.stderr, "claimctl %s: %s\n", name, escText(xe.msg))
	case errors.As(err, &ref):
		code, body.Kind, body.Code = refusalExit[ref.Code], "refusal", string(ref.Code)
		body.Reason, body.Hint, body.ClaimID = ref.Reason, ref.Hint, ref.ClaimID
		for _, k := range ref.Keys {
			body.Keys = append(body.Keys, keyOut(k, ""))
		}
		if ref.Err != nil {
			s := ref.Err.Error()
			body.Cause = &s
		}
		if code == 0 {
			code = exitError
		}
		fmt.Fprintf(e.stderr, "claimctl %s: %s\n", name, describeRefusal(ref))
	default:
		body.Kind = "error"
		var cut *stepCutError
		if errors.As(err, &cut) {
			body.Published, body.Unpublished, body.Finish = &cut.published, &cut.pending, cut.finish
		}
		fmt.Fprintf(e.stderr, "claimctl %s: %s\n", name, escText(err.Error()))
	}
	body.Exit = int(code)
	if c.json {
		writeJSON(e.stdout, errorJSON{Error: body})
	}
	return code
}

// describeRefusal is a refusal for an operator: code, what was seen, the
// cause, and what to do, on separate lines.
func describeRefusal(r *claimstore.Refusal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "refused (%s, exit %d): %s", r.Code, refusalExit[r.Code], escText(r.Reason))
	if r.Err != nil {
		fmt.Fprintf(&b, "\n  cause: %s", escText(r.Err.Error()))
	}
	if r.Hint != "" {
		fmt.Fprintf(&b, "\n  next: %s", escText(r.Hint))
	}
	return b.String()
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
