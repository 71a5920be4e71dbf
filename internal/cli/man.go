package cli

import (
	"flag"
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/claimstore"
)

// manPage is claimctl(1) in roff, generated from what `claimctl help`
// prints: the same introduction, command table, synopses, docs, flags, exit
// codes and root description. The committed claimctl.1 must equal it
// (TestManPage; regenerate with `go test ./internal/cli -run TestManPage
// -update`), so the man page cannot drift from the code.
func manPage() string {
	var b strings.Builder
	b.WriteString(`.\" Generated from claimctl's command table: do not edit.
.\" Regenerate: go test ./internal/cli -run TestManPage -update
.TH CLAIMCTL 1 "" "claimstore" "User Commands"
.SH NAME
claimctl \- the operator tool of claimstore: crash-safe writer claims
.SH SYNOPSIS
.B claimctl
[\fB\-\-root\fR \fIDIR\fR] [\fB\-\-json\fR] \fICOMMAND\fR [\fIflags\fR]
`)
	for _, c := range commands {
		fmt.Fprintf(&b, ".br\n.B claimctl %s\n%s\n", c.name, roff(c.args))
	}
	b.WriteString(".SH DESCRIPTION\n")
	roffDoc(&b, mainIntro)
	roffDoc(&b, mainGlobal)
	roffDoc(&b, keysHelp)
	b.WriteString(".SH COMMANDS\n")
	for _, c := range commands {
		fmt.Fprintf(&b, ".SS %s\n", c.name)
		fmt.Fprintf(&b, ".B claimctl %s\n%s\n", c.name, roff(c.args))
		roffDoc(&b, c.summary)
		if len(c.aliases) > 0 {
			roffDoc(&b, "Alias: "+strings.Join(c.aliases, ", ")+".")
		}
		if c.doc != "" {
			roffDoc(&b, c.doc)
		}
		fs, _, _ := c.flags()
		fs.VisitAll(func(f *flag.Flag) {
			head, usage := flagHelp(f)
			name, arg, _ := strings.Cut(head, " ")
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fR", roff(name))
			if arg != "" {
				fmt.Fprintf(&b, " \\fI%s\\fR", roff(arg))
			}
			fmt.Fprintf(&b, "\n%s\n", roff(usage))
		})
	}
	b.WriteString(".SH EXIT STATUS\n")
	for _, x := range exitCodes {
		fmt.Fprintf(&b, ".TP\n.B %d\n\\fB%s\\fR: %s\n", x.Code, roff(x.Name), roff(x.Meaning))
	}
	roffDoc(&b, runExitNote)
	b.WriteString(".SS Refusal codes\n")
	for _, code := range claimstore.Codes {
		fmt.Fprintf(&b, ".TP\n.B %s\nexit %d: %s\n", roff(string(code)), refusalExit[code], roff(refusalDocs[code]))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	for _, v := range [][2]string{
		{envRoot, "the claim root when --root is not given: an absolute path or an etcd:// URL; a relative path is refused (exit 2), since the environment outlives the directory it was set in and two supervisors started in two directories would both win the same pair"},
		{"XDG_STATE_HOME", "the default root of a user who is not root is $XDG_STATE_HOME/claimstore"},
		{"HOME", "without XDG_STATE_HOME, the default root of a user who is not root is ~/.local/state/claimstore"},
		{"DBUS_SYSTEM_BUS_ADDRESS, DBUS_SESSION_BUS_ADDRESS, XDG_RUNTIME_DIR", "where classify finds the service manager's bus, unless --bus names it"},
	} {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(v[0]), roff(v[1]))
	}
	b.WriteString(".SH FILES\n")
	roffDoc(&b, rootHelp)
	b.WriteString(".SH SEE ALSO\n")
	roffDoc(&b, "REFERENCE.md in the claimstore source (cmd/claimctl/REFERENCE.md): every command, exit code and JSON field; `claimctl help json` for the JSON field names.")
	return b.String()
}

// roff escapes text for a roff line: backslashes, and dashes (so that
// --flag is not set as an en dash and can be searched for as typed).
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffDoc writes doc text as help shows it: filled paragraphs, and lines
// that start with spaces kept as written (no fill).
func roffDoc(b *strings.Builder, doc string) {
	for _, para := range strings.Split(strings.TrimSpace(doc), "\n\n") {
		b.WriteString(".PP\n")
		nofill := false
		for _, line := range strings.Split(para, "\n") {
			pre := strings.HasPrefix(line, " ")
			switch {
			case pre && !nofill:
				b.WriteString(".nf\n")
				nofill = true
			case !pre && nofill:
				b.WriteString(".fi\n")
				nofill = false
			}
			if pre {
				b.WriteString(roff(line) + "\n")
			} else {
				b.WriteString(roff(strings.TrimSpace(line)) + "\n")
			}
		}
		if nofill {
			b.WriteString(".fi\n")
		}
	}
}
