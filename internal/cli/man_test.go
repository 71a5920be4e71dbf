package cli

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files (claimctl.1) from the code")

// The committed man page is the one the code generates: regenerate it with
// `go test ./internal/cli -run TestManPage -update`.
func TestManPage(t *testing.T) {
	want := manPage()
	if *update {
		if err := os.WriteFile(manPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatalf("%v; generate it with `go test ./internal/cli -run TestManPage -update`", err)
	}
	if string(got) != want {
		t.Fatalf("cmd/claimctl/claimctl.1 is not what the code generates: run `go test ./internal/cli -run TestManPage -update` and commit it")
	}
	// Every command and every flag is in it, as typed.
	for _, c := range commands {
		if !strings.Contains(want, ".SS "+c.name+"\n") {
			t.Errorf("man page has no section for %s", c.name)
		}
		for _, f := range c.commandFlags() {
			if !strings.Contains(want, `\fB`+roff(f.dash())+`\fR`) {
				t.Errorf("man page does not list %s of %s", f.dash(), c.name)
			}
		}
	}
}

// The man page says what README.md and REFERENCE.md say beside their own
// tables and root sections: run's own exit codes after the exit status
// table, the root creation rule in FILES, why a relative CLAIMSTORE_ROOT is
// refused in ENVIRONMENT, and how keys that draw alike are printed.
func TestManPageSections(t *testing.T) {
	page := manPage()
	section := func(name string) string {
		_, after, ok := strings.Cut(page, ".SH "+name+"\n")
		if !ok {
			t.Fatalf("man page has no %s section", name)
		}
		body, _, _ := strings.Cut(after, "\n.SH ")
		return body
	}
	for _, c := range []struct{ section, want string }{
		{"EXIT STATUS", `126 or 127 when the command could not be executed`},
		{"EXIT STATUS", `run \-\-conflict\-exit\-code N makes run's own outcomes exit N`},
		{"ENVIRONMENT", `a relative path is refused (exit 2), since the environment outlives the directory`},
		{"FILES", "A root is created only where nothing else lives"},
		{"FILES", "holds lost+found alone"},
		{"FILES", "$CLAIMSTORE_ROOT is refused (exit 2)"},
		{"DESCRIPTION", `[h:2c247a58]`},
	} {
		if !strings.Contains(strings.ReplaceAll(section(c.section), "\n", " "), c.want) {
			t.Errorf("man page's %s section does not say %q", c.section, c.want)
		}
	}
}

// The man page renders without warnings, where man(1) is installed (in CI,
// scripts/ci-package-check installs it before the tests run; elsewhere the
// text is still checked above).
func TestManPageRenders(t *testing.T) {
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("man is not installed: the rendering is not checked (the page's text is, by TestManPage)")
	}
	cmd := exec.Command("man", "--warnings", "-l", "-Tutf8", manPath)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("man -l claimctl.1: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"CLAIMCTL(1)", "--follow", "EXIT STATUS"} {
		if !strings.Contains(stripOverstrike(string(out)), want) {
			t.Errorf("rendered man page lacks %q", want)
		}
	}
	if stderr.Len() > 0 {
		t.Errorf("man warns:\n%s", stderr.String())
	}
}

// stripOverstrike removes the backspace sequences grotty writes for bold
// and underline.
func stripOverstrike(s string) string {
	var b []rune
	for _, r := range s {
		if r == '\b' && len(b) > 0 {
			b = b[:len(b)-1]
			continue
		}
		b = append(b, r)
	}
	return string(b)
}

// The user's documents of claimctl live beside its command, cmd/claimctl;
// the code that they document lives here.
const (
	manPath       = "../../cmd/claimctl/claimctl.1"
	referencePath = "../../cmd/claimctl/REFERENCE.md"
)
