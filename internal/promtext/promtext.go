package promtext

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type is a metric family's type.
type Type string

const (
	Counter Type = "counter"
	Gauge   Type = "gauge"
)

// Family is one metric: its name, its help (one line of text) and type,
// and its samples.
type Family struct {
	Name    string
	Help    string
	Type    Type
	Samples []Sample
}

// Sample is one value of a family, with its labels (written in the order
// given).
type Sample struct {
	Labels []Label
	Value  float64
}

// Label is a label's name and value.
type Label struct{ Name, Value string }

// Write writes the families in the order given, or nothing and an error
// naming what is wrong when a family breaks the format (see the package
// documentation).
func Write(w io.Writer, families []Family) error {
	if err := Check(families); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	for _, f := range families {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range f.Samples {
			bw.WriteString(f.Name)
			if len(s.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					fmt.Fprintf(bw, "%s=\"%s\"", l.Name, escapeValue(l.Value))
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(formatValue(s.Value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// Check reports the first way families break the format, or nil.
func Check(families []Family) error {
	seen := map[string]bool{}
	for _, f := range families {
		if !validName(f.Name, true) {
			return fmt.Errorf("promtext: %q is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", f.Name)
		}
		if seen[f.Name] {
			return fmt.Errorf("promtext: metric %s is given twice", f.Name)
		}
		seen[f.Name] = true
		switch total := strings.HasSuffix(f.Name, "_total"); {
		case f.Type != Counter && f.Type != Gauge:
			return fmt.Errorf("promtext: metric %s: type %q is neither counter nor gauge", f.Name, f.Type)
		case f.Type == Counter && !total:
			return fmt.Errorf("promtext: counter %s: a counter's name ends in _total", f.Name)
		case f.Type != Counter && total:
			return fmt.Errorf("promtext: %s %s: only a counter's name ends in _total", f.Type, f.Name)
		}
		if f.Help == "" {
			return fmt.Errorf("promtext: metric %s has no help", f.Name)
		}
		series := map[string]bool{}
		for _, s := range f.Samples {
			names := map[string]bool{}
			var id strings.Builder
			for _, l := range s.Labels {
				if !validName(l.Name, false) || strings.HasPrefix(l.Name, "__") {
					return fmt.Errorf("promtext: metric %s: %q is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)", f.Name, l.Name)
				}
				if names[l.Name] {
					return fmt.Errorf("promtext: metric %s: label %s is given twice in one sample", f.Name, l.Name)
				}
				names[l.Name] = true
				fmt.Fprintf(&id, "%s=%q,", l.Name, l.Value)
			}
			if series[id.String()] {
				return fmt.Errorf("promtext: metric %s: two samples with the labels {%s}", f.Name, strings.TrimSuffix(id.String(), ","))
			}
			series[id.String()] = true
			if f.Type == Counter && (s.Value < 0 || math.IsNaN(s.Value)) {
				return fmt.Errorf("promtext: counter %s: value %v (a counter is never negative)", f.Name, s.Value)
			}
		}
	}
	return nil
}

// validName reports whether s is a metric name (colons allowed) or a label
// name.
func validName(s string, metric bool) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || metric && c == ':' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// escapeHelp escapes help text: backslash and newline.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(strings.ToValidUTF8(s, string(utf8.RuneError)))
}

// escapeValue escapes a label value: backslash, double quote and newline.
func escapeValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(strings.ToValidUTF8(s, string(utf8.RuneError)))
}

// formatValue writes a value as the shortest decimal that reads back as it
// (counts and Unix times read as written: 1234567 and 1767225600.125, not
// 1.234567e+06), with an exponent only where that would be long, and the
// special values as the format spells them.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == 0 || math.Abs(v) >= 1e-6 && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
