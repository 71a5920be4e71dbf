package cli

import (
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/claimstore/claimstore/internal/quote"
)

// defaultWidth is the width help is wrapped to when its output is not a
// terminal (a pipe, a file, a test): the width of a classic terminal, so
// that `claimctl help | less` and the committed man page's source read the
// same everywhere.
const defaultWidth = 80

// helpWidth is the width to wrap help written to w at: the terminal's
// columns when w is one, else defaultWidth. Narrower than 40 columns is
// taken as 40: wrapping a synopsis into one word per line helps nobody.
func helpWidth(w io.Writer) int {
	if o, ok := w.(*outWriter); ok {
		w = o.w
	}
	if f, ok := w.(*os.File); ok {
		if c := terminalColumns(int(f.Fd())); c > 0 {
			return max(c, 40)
		}
	}
	return defaultWidth
}

// wrapLines breaks text into lines of at most width columns (a word longer
// than that gets a line of its own), the first line starting after first
// columns already used, the others indented by indent spaces.
func wrapLines(text string, first, indent, width int) string {
	var b strings.Builder
	col := first
	pad := strings.Repeat(" ", indent)
	for i, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case col+1+n > width:
			b.WriteString("\n" + pad)
			col = indent
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
}

// wrapDoc re-wraps a command's doc to width: paragraphs (separated by blank
// lines) are filled; a line that starts with spaces (an example, a table)
// is kept as written.
func wrapDoc(doc string, width int) string {
	var out []string
	for _, para := range strings.Split(strings.TrimSpace(doc), "\n\n") {
		var kept []string
		var fill []string
		flush := func() {
			if len(fill) > 0 {
				kept = append(kept, wrapLines(strings.Join(fill, " "), 0, 0, width))
				fill = nil
			}
		}
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, " ") {
				flush()
				kept = append(kept, line)
				continue
			}
			fill = append(fill, line)
		}
		flush()
		out = append(out, strings.Join(kept, "\n"))
	}
	return strings.Join(out, "\n\n")
}

// table writes rows of columns: every column but the last padded to its
// widest cell, the last wrapped to width with a hanging indent.
func table(w io.Writer, indent string, rows [][]string, width int) {
	if len(rows) == 0 {
		return
	}
	n := len(rows[0])
	widths := make([]int, n)
	for _, r := range rows {
		for i := 0; i < n-1; i++ {
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i := 0; i < n-1; i++ {
			b.WriteString(r[i])
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(r[i])+2))
		}
		col := utf8.RuneCountInString(b.String())
		last := r[n-1]
		if last == "" {
			io.WriteString(w, strings.TrimRight(b.String(), " ")+"\n")
			continue
		}
		// A last column squeezed below 20 columns goes under the others.
		if width-col < 20 {
			io.WriteString(w, strings.TrimRight(b.String(), " ")+"\n")
			col = len(indent) + 4
			b.Reset()
			b.WriteString(strings.Repeat(" ", col))
		}
		b.WriteString(wrapLines(last, col, col, width))
		io.WriteString(w, b.String()+"\n")
	}
}

// flagHelp is one flag as help shows it: "--name PLACEHOLDER" and its usage.
func flagHelp(f *flag.Flag) (string, string) {
	name, usage := flag.UnquoteUsage(f)
	head := flagDash(f.Name)
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		switch name {
		case "", "value", "string":
			name = "VALUE"
		case "int", "uint":
			name = "N"
		}
		head += " " + strings.ToUpper(name)
	}
	if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
		usage += " (default " + strconv.Quote(f.DefValue) + ")"
	}
	return head, usage
}

// dashFlagErr rewrites the flag package's messages ("flag provided but not
// defined: -x", "invalid value … for flag -n: …", "flag needs an argument:
// -root") to name flags as help does: --name, -n for a one-letter flag. By
// hand, not with a regular expression: claimctl links no regexp (start-up).
func dashFlagErr(msg string) string {
	if arg, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok && len(arg) > quote.Max {
		// What the user typed, bounded as any value a message echoes.
		return "bad flag syntax: " + quotePrefix(arg)
	}
	for _, marker := range []string{"defined: -", "argument: -", "for flag -", "for -"} {
		i := strings.Index(msg, marker)
		if i < 0 {
			continue
		}
		start := i + len(marker) - 1 // at the dash
		end := start
		for end < len(msg) && msg[end] == '-' {
			end++
		}
		name := end
		for name < len(msg) && msg[name] != ':' && msg[name] != ' ' {
			name++
		}
		if name == end {
			continue
		}
		dashed := flagDash(msg[end:name])
		if len(dashed) > quote.Max {
			// An unknown flag is what the user typed: bounded like any
			// value a message echoes.
			dashed = quotePrefix(dashed)
		}
		return msg[:start] + dashed + msg[name:]
	}
	return msg
}
