package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// tourStep is one command of README.md's tour: the line after "$ ", the
// output shown under it, and its exit status ("# exit N" on the line; 0
// otherwise).
type tourStep struct {
	cmd  string
	want []string
	exit int
}

var tourExit = regexp.MustCompile(`#\s*exit (\d+)\s*$`)

// readTour returns the commands of README.md's "A tour of claimctl", from
// its fenced blocks, in order.
func readTour(t *testing.T) []tourStep {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := section(string(readme), "## A tour of claimctl")
	if text == "" {
		t.Fatal(`README.md has no "## A tour of claimctl" section`)
	}
	var steps []tourStep
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			in = !in
		case !in:
		case strings.HasPrefix(line, "$ "):
			st := tourStep{cmd: strings.TrimPrefix(line, "$ ")}
			if m := tourExit.FindStringSubmatch(line); m != nil {
				st.exit, _ = strconv.Atoi(m[1])
			}
			steps = append(steps, st)
		case len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	for i := range steps {
		// The blank line that separates one command from the next.
		w := steps[i].want
		for len(w) > 0 && w[len(w)-1] == "" {
			w = w[:len(w)-1]
		}
		steps[i].want = w
	}
	return steps
}

// tourNorm makes output comparable across runs: times, pids and process
// start ticks vary; column padding varies with them.
var tourNorm = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`\b(pid|process) \d+`), "$1 N"},
	{regexp.MustCompile(`\bstart \d+`), "start N"},
	{regexp.MustCompile(` +`), " "},
}

func normTour(line string) string {
	for _, n := range tourNorm {
		line = n.re.ReplaceAllString(line, n.with)
	}
	return strings.TrimRight(line, " ")
}

// TestReadmeTour runs README.md's tour as written, one bash session, with
// /tmp/tour moved to the script's work directory, and compares each
// command's output (standard output and error) and exit status with what
// the README shows; "..." in the README stands for the rest of a command's
// output.
func TestReadmeTour(t *testing.T) {
	steps := readTour(t)
	if len(steps) < 5 {
		t.Fatalf("README.md's tour has %d commands; the parser found too few", len(steps))
	}
	if !strings.Contains(steps[0].cmd+steps[1].cmd, "CLAIMSTORE_ROOT=") {
		t.Errorf("the tour must set CLAIMSTORE_ROOT to a scratch directory before anything else; it starts with %q, %q", steps[0].cmd, steps[1].cmd)
	}
	var script strings.Builder
	script.WriteString("exec 2>&1\n")
	for i, st := range steps {
		fmt.Fprintf(&script, "echo '@@@step %d'\n%s\necho \"@@@exit $?\"\n", i, strings.ReplaceAll(st.cmd, "/tmp/tour", "$WORK/tour"))
	}
	dir := t.TempDir()
	archive := "exec bash --norc --noprofile tour.sh\ntourcheck\n-- tour.sh --\n" + script.String()
	if err := os.WriteFile(filepath.Join(dir, "tour.txtar"), []byte(archive), 0o644); err != nil {
		t.Fatal(err)
	}
	p := params(dir)
	cmds := map[string]func(*testscript.TestScript, bool, []string){}
	for k, v := range scriptCmds {
		cmds[k] = v
	}
	cmds["tourcheck"] = func(ts *testscript.TestScript, neg bool, args []string) {
		out := strings.ReplaceAll(ts.ReadFile("stdout"), ts.Getenv("WORK")+"/tour", "/tmp/tour")
		chunks := strings.Split(out, "@@@step ")[1:]
		if len(chunks) != len(steps) {
			ts.Fatalf("the tour ran %d of %d commands:\n%s", len(chunks), len(steps), out)
		}
		var errs []string
		errorf := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
		for i, st := range steps {
			body, exit, _ := strings.Cut(chunks[i], "@@@exit ")
			_, body, _ = strings.Cut(body, "\n") // the step number
			got := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
			if body == "" {
				got = nil
			}
			if code, _ := strconv.Atoi(strings.TrimSpace(exit)); code != st.exit {
				errorf("$ %s\nexited %d, the README says %d; output:\n%s", st.cmd, code, st.exit, body)
			}
			want := st.want
			if n := len(want); n > 0 && want[n-1] == "..." {
				want = want[:n-1]
				if len(got) > len(want) {
					got = got[:len(want)]
				}
			}
			if len(got) != len(want) {
				errorf("$ %s\nprinted %d lines, the README shows %d:\n%s", st.cmd, len(got), len(want), body)
				continue
			}
			for j := range want {
				if normTour(got[j]) != normTour(want[j]) {
					errorf("$ %s\nline %d:\n got: %s\nwant: %s", st.cmd, j+1, got[j], want[j])
				}
			}
		}
		if len(errs) > 0 {
			ts.Fatalf("README.md's tour does not run as written:\n\n%s", strings.Join(errs, "\n\n"))
		}
	}
	p.Cmds = cmds
	testscript.Run(t, p)
}
