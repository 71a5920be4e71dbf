package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// No message echoes more than a bounded prefix of a value it was given: each
// command line below carries a 100 KB value where a flag, an argument, a
// root or an environment variable belongs, and is refused (exit 2) with
// stdout and stderr together under 2 KB, still naming what was wrong.
// Before, each of these echoed the value whole (some twice), 100-300 KB.
func TestMessagesQuoteABoundedPrefix(t *testing.T) {
	const bound = 2048
	big := strings.Repeat("x", 100_000)
	root := filepath.Join(t.TempDir(), "root")
	pair := []string{"--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x"}
	with := func(head []string, tail ...string) []string {
		return append(append(append([]string{}, head...), pair...), tail...)
	}
	claim := "c0000000000000000000000a1"
	for _, c := range []struct {
		name  string
		env   map[string]string
		args  []string
		names string // what the message must still name
	}{
		{"show --claim", nil, []string{"show", "--root", root, "--claim", big}, "--claim"},
		{"acquire --owner-pid", nil, with([]string{"acquire"}, "--owner-pid", big), "--owner-pid"},
		{"acquire --unit", nil, with([]string{"acquire"}, "--owner-pid", "parent", "--unit", big), "--unit"},
		{"acquire --claim-id", nil, with([]string{"acquire"}, "--owner-pid", "parent", "--claim-id", big), "--claim-id"},
		{"acquire --set", nil, with([]string{"acquire"}, "--owner-pid", "parent", "--set", "a="+big), "--set"},
		{"acquire --incarnation", nil, with([]string{"acquire"}, "--owner-pid", "parent", "--incarnation", big), "--incarnation"},
		{"release --proof", nil, with([]string{"release"}, "--claim", claim, "--proof", big), "--proof"},
		{"release --proof REF", nil, with([]string{"release"}, "--claim", claim, "--proof", "cohortProof:"+big), "--proof"},
		{"classify --units", nil, with([]string{"classify"}, "--units", big), "--units"},
		{"classify --bus", nil, with([]string{"classify"}, "--bus", big), "--bus"},
		{"list --state", nil, []string{"list", "--root", root, "--state", big}, "--state"},
		{"advance --state", nil, with([]string{"advance"}, "--claim", claim, "--state", big), "--state"},
		{"log --since", nil, []string{"log", "--root", root, "--session", "x", "--since", big}, "--since"},
		{"log -n", nil, []string{"log", "--root", root, "--session", "x", "-n", big}, "-n"},
		{"wait --timeout", nil, with([]string{"wait"}, "--timeout", big), "--timeout"},
		{"prune --older-than", nil, []string{"prune", "--root", root, "--older-than", big}, "--older-than"},
		{"decommission --machine", nil, []string{"decommission", "--root", root, "--machine", big, "--evidence", "wiped", "--reason", "r"}, "machine id"},
		{"etcd root", nil, []string{"show", "--root", "etcd://" + big, "--session", "x"}, "--root"},
		{"etcd root endpoint", nil, []string{"show", "--root", "etcd://" + big[:3000] + "/p", "--session", "x"}, "endpoint"},
		{"--root path", nil, []string{"show", "--root", "/tmp/" + big, "--session", "x"}, "--root"},
		{"CLAIMSTORE_ROOT", map[string]string{envRoot: "/" + big}, []string{"show", "--session", "x"}, envRoot},
		{"relative CLAIMSTORE_ROOT", map[string]string{envRoot: big[:4000]}, []string{"show", "--session", "x"}, "relative path"},
		{"help TOPIC", nil, []string{"help", big}, "help topic"},
		{"completion SHELL", nil, []string{"completion", big}, "shell"},
		{"unknown command", nil, []string{big}, "unknown command"},
		{"unknown flag", nil, []string{"show", "--root", root, "--" + big}, "not defined"},
		{"bad flag syntax", nil, []string{"show", "--root", root, "---" + big}, "bad flag syntax"},
		{"not a global flag", nil, []string{"--" + big, "show"}, "not a global flag"},
		{"global flag value", nil, []string{"--root", root, "--dial-timeout", big, "show", "--session", "x"}, "--dial-timeout"},
		{"given twice", nil, []string{"show", "--root", root, "--session", big, "--session", big}, "--session is given twice"},
		{"unexpected argument", nil, with([]string{"show"}, big), "unexpected argument"},
		{"run --adopt with a command", nil, with([]string{"run"}, "--adopt", "--", big), "--adopt"},
		{"seat key not UTF-8", nil, []string{"show", "--root", root, "--seat", big[:4000] + "\xff", "--project", "p", "--workspace", "/w"}, "not valid UTF-8"},
		{"session key with NUL", nil, []string{"show", "--root", root, "--session", big[:4000] + "\x00"}, "NUL"},
		{"seat key", nil, []string{"show", "--root", root, "--seat", big, "--project", "p", "--workspace", "/w"}, "--seat"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runIn(t, c.env, c.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage)", code, exitUsage)
			}
			if n := len(stdout) + len(stderr); n > bound {
				t.Errorf("stdout and stderr hold %d bytes, more than %d: the value is echoed whole\n%.300s…", n, bound, stderr)
			}
			if !strings.Contains(stderr, c.names) {
				t.Errorf("stderr does not name %q:\n%.300s", c.names, stderr)
			}
		})
	}
}

// A global flag's bad value says what the flag takes, as a command's does
// (before: "--dial-timeout \"5\": parse error").
func TestGlobalFlagValueSaysWhatItTakes(t *testing.T) {
	code, _, stderr := runIn(t, nil, "--root", t.TempDir(), "--dial-timeout", "5", "show", "--session", "x")
	if code != exitUsage || !strings.Contains(stderr, `claimctl show: --dial-timeout "5": not a duration: give a number with a unit, such as 5s`) {
		t.Errorf("exit %d, want 2 naming the accepted forms:\n%s", code, stderr)
	}
}

// A one-letter flag is named as it is typed, -n, in every message.
func TestOneLetterFlagNamedAsTyped(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	for _, args := range [][]string{
		{"log", "--root", root, "--session", "x", "-n", "1", "-n", "2"},
		{"log", "--root", root, "--session", "x", "-n", "many"},
	} {
		code, _, stderr := runIn(t, nil, args...)
		if code != exitUsage || !strings.Contains(stderr, "claimctl log: -n ") || strings.Contains(stderr, "--n") {
			t.Errorf("claimctl %s: exit %d, want 2 and -n named as typed:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}
