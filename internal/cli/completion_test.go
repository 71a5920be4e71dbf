package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// complete runs the bash completion function on a command line (the words
// so far, the last one being completed) and returns what it offers.
func bashComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shQuote(w))
	}
	prog := "source " + shQuote(script) + `
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
_claimctl
printf '%s\n' "${COMPREPLY[@]}"
`
	out, err := exec.Command("bash", "--norc", "--noprofile", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// The bash completion, sourced in a real bash, registers itself and offers
// the commands, each command's flags (every registered one, from the same
// flag sets claimctl parses with), and flag values.
func TestCompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed: the bash completion cannot be sourced")
	}
	script := filepath.Join(t.TempDir(), "claimctl.bash")
	if err := os.WriteFile(script, []byte(runForTest(t, "completion", "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "--norc", "--noprofile", "-c", "source "+shQuote(script)+"; complete -p claimctl").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "complete -F _claimctl claimctl" {
		t.Fatalf("complete -p claimctl: %v %q", err, out)
	}

	if got, want := bashComplete(t, script, "claimctl", ""), commandWords(); !sameSet(got, want) {
		t.Errorf("claimctl <TAB>: %q, want %q", got, want)
	}
	if got := bashComplete(t, script, "claimctl", "cl"); !slices.Equal(got, []string{"classify"}) {
		t.Errorf("claimctl cl<TAB>: %q", got)
	}
	if got := bashComplete(t, script, "claimctl", "--root", "/tmp", "l"); !sameSet(got, []string{"list", "ls", "log"}) {
		t.Errorf("claimctl --root /tmp l<TAB>: %q", got)
	}
	for _, c := range commands {
		for _, name := range append([]string{c.name}, c.aliases...) {
			got := bashComplete(t, script, "claimctl", name, "-")
			if want := dashes(c.commandFlags()); !sameSet(got, want) {
				t.Errorf("claimctl %s -<TAB>: %q, want %q", name, got, want)
			}
		}
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"claimctl", "log", "--fo"}, []string{"--follow"}},
		{[]string{"claimctl", "classify", "--units", ""}, []string{"auto", "user", "system", "none"}},
		{[]string{"claimctl", "list", "--state", "st"}, []string{"stopping", "stopped"}},
		{[]string{"claimctl", "acquire", "--session", ""}, nil},
		{[]string{"claimctl", "help", "ex"}, []string{"exit-codes"}},
		{[]string{"claimctl", "completion", ""}, []string{"bash", "fish", "zsh"}},
	} {
		if got := bashComplete(t, script, tc.words...); !sameSet(got, tc.want) {
			t.Errorf("%q<TAB>: %q, want %q", tc.words, got, tc.want)
		}
	}
	// --root completes directories, --output (metrics) files.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "claimstore.prom"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "claims"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"claimctl", "metrics", "--output", dir + "/cl"}, []string{dir + "/claimstore.prom", dir + "/claims"}},
		{[]string{"claimctl", "metrics", "--root", dir + "/cl"}, []string{dir + "/claims"}},
	} {
		if got := bashComplete(t, script, tc.words...); !sameSet(got, tc.want) {
			t.Errorf("%q<TAB>: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// The zsh and fish scripts name every command and every flag of each (they
// are generated from the same tables; no zsh or fish is needed to check
// that), and zsh's parses where zsh is installed.
func TestCompletionOtherShells(t *testing.T) {
	for _, sh := range []string{"zsh", "fish"} {
		text := runForTest(t, "completion", sh)
		for _, c := range commands {
			if !strings.Contains(text, c.name) {
				t.Errorf("%s completion does not name %s", sh, c.name)
			}
			for _, f := range c.commandFlags() {
				form := f.dash()
				if sh == "fish" {
					form = "-l " + f.name
					if len(f.name) == 1 {
						form = "-s " + f.name
					}
				}
				if !strings.Contains(text, form) {
					t.Errorf("%s completion does not offer %s of %s", sh, form, c.name)
				}
			}
		}
		if _, err := exec.LookPath(sh); err == nil {
			flag := "-n"
			if sh == "fish" {
				flag = "--no-execute"
			}
			cmd := exec.Command(sh, flag)
			cmd.Stdin = strings.NewReader(text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", sh, flag, err, out)
			}
		}
	}
	code, _, stderr := runIn(t, nil, "completion", "tcsh")
	if code != exitUsage || !strings.Contains(stderr, `shell "tcsh": want bash, zsh or fish`) {
		t.Errorf("completion tcsh: exit %d, %s", code, stderr)
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(sorted(a), sorted(b))
}
