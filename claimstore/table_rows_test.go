package claimstore

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The decision table in code and in ARCHITECTURE.md are one table: the
// same rows, numbered alike, in the same order, with the same wording of
// each row's condition. A row added, moved or reworded on one side only
// fails here.
func TestDecisionRowsMatchArchitecture(t *testing.T) {
	data, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Recovery: the decision table")
	if !ok {
		t.Fatal(`ARCHITECTURE.md has no "## Recovery: the decision table" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct{ Step, When string }
	var doc []row
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "| ") {
			continue
		}
		step := strings.TrimSpace(cells[1])
		if step == "#" || step == "" || strings.Trim(step, "-") == "" {
			continue
		}
		doc = append(doc, row{step, strings.TrimSpace(cells[2])})
	}
	var code []row
	for _, r := range decisionTable {
		code = append(code, row{r.step, r.when})
	}
	if len(doc) == 0 {
		t.Fatal("no table rows found in ARCHITECTURE.md's decision table section")
	}
	if diff := cmp.Diff(doc, code); diff != "" {
		t.Errorf("decisionTable (code) and ARCHITECTURE.md's table differ (-doc +code):\n%s", diff)
	}
}
