package cli

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// synopsisFlags returns the flags a synopsis names: every word that starts
// with a dash, without its brackets, value or trailing punctuation.
func synopsisFlags(syn string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(syn) {
		w = strings.TrimLeft(w, "[(")
		if !strings.HasPrefix(w, "-") || w == "--" {
			// "--" ends the flags (run's -- CMD): it is not a flag.
			continue
		}
		w, _, _ = strings.Cut(w, "=")
		w = strings.TrimRight(w, "])|.")
		out[w] = true
	}
	return out
}

// Every flag a command registers is in its synopsis (the line `claimctl
// help CMD` starts with), in its help's flag list, and in REFERENCE.md's
// synopsis of the command; and every flag a synopsis names is registered.
// Flags are written --name everywhere (-n for a one-letter flag).
func TestSynopsisNamesEveryFlag(t *testing.T) {
	ref, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	refSyn := map[string]string{}
	block := section(string(ref), "## Commands")
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "claimctl" {
			// SEAT and PAIR abbreviate the key flags.
			s := strings.ReplaceAll(line, "PAIR", "SEAT --session ID")
			refSyn[f[1]] = strings.ReplaceAll(s, "SEAT", "--seat S --project P --workspace W")
		}
	}
	for _, c := range commands {
		registered := map[string]bool{}
		for _, f := range c.commandFlags() {
			registered[f.dash()] = true
		}
		help := runForTest(t, "help", c.name)
		usage, _, _ := strings.Cut(help, "\n\n")
		for name, where := range map[string]string{
			"claimctl help " + c.name + "'s synopsis": usage,
			"REFERENCE.md's synopsis":                 refSyn[c.name],
		} {
			named := synopsisFlags(where)
			for f := range registered {
				if !named[f] {
					t.Errorf("%s: %s does not name %s", c.name, name, f)
				}
			}
			for f := range named {
				if !registered[f] {
					t.Errorf("%s: %s names %s, which %s does not take", c.name, name, f, c.name)
				}
			}
		}
		_, flags, _ := strings.Cut(help, "\nFlags:\n")
		for f := range registered {
			if !strings.Contains(flags, "\n  "+f+" ") && !strings.HasPrefix(flags, "  "+f+" ") {
				t.Errorf("%s: claimctl help %s lists no %s under Flags", c.name, c.name, f)
			}
		}
		for _, line := range strings.Split(flags, "\n") {
			if strings.HasPrefix(line, "  -") && len(line) > 4 && line[3] != '-' && line[4] != ' ' {
				t.Errorf("%s: help writes a flag with one dash: %q", c.name, line)
			}
		}
	}
}

// Help is wrapped to 80 columns when its output is not a terminal (a test's
// buffer): no line is longer, unless it is one unbreakable word or an
// example kept as written.
func TestHelpWidth(t *testing.T) {
	pages := [][]string{{"help"}, {"help", "json"}, {"help", "root"}, {"help", "exit-codes"}}
	for _, c := range commands {
		pages = append(pages, []string{"help", c.name})
	}
	for _, args := range pages {
		for _, line := range strings.Split(runForTest(t, args...), "\n") {
			if utf8.RuneCountInString(line) > defaultWidth && strings.Contains(strings.TrimSpace(line), " ") && !strings.HasPrefix(line, "  ") {
				t.Errorf("claimctl %s: line of %d columns: %q", strings.Join(args, " "), utf8.RuneCountInString(line), line)
			}
		}
	}
}

// Usage errors from the flag package name flags as help does.
func TestDashFlagErr(t *testing.T) {
	for in, want := range map[string]string{
		"flag provided but not defined: -bogus":             "flag provided but not defined: --bogus",
		"flag provided but not defined: --bogus":            "flag provided but not defined: --bogus",
		"flag needs an argument: -root":                     "flag needs an argument: --root",
		`invalid value "x" for flag -n: parse error`:        `invalid value "x" for flag -n: parse error`,
		`invalid value "x" for flag -seat-rev: parse error`: `invalid value "x" for flag --seat-rev: parse error`,
		`invalid boolean value "x" for -full: parse error`:  `invalid boolean value "x" for --full: parse error`,
		"bad flag syntax: ---x":                             "bad flag syntax: ---x",
	} {
		if got := dashFlagErr(in); got != want {
			t.Errorf("dashFlagErr(%q) = %q, want %q", in, got, want)
		}
	}
}
