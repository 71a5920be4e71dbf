package promtext

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Write's output, byte for byte: HELP and TYPE lines, labels in the order
// given, values in Go's shortest form and the format's special spellings,
// a family without samples as its two lines alone.
func TestWrite(t *testing.T) {
	var b strings.Builder
	err := Write(&b, []Family{
		{Name: "x_pairs", Help: "Pairs by state.", Type: Gauge, Samples: []Sample{
			{Labels: []Label{{"state", "active"}, {"root", "/r"}}, Value: 2},
			{Labels: []Label{{"state", "reserved"}, {"root", "/r"}}, Value: 0},
		}},
		{Name: "x_revisions_total", Help: "Revisions.", Type: Counter, Samples: []Sample{{Value: 1234567}}},
		{Name: "x_age_seconds", Help: "Age.", Type: Gauge, Samples: []Sample{{Value: 0.25}, {Labels: []Label{{"a", "b"}}, Value: 1e21}, {Labels: []Label{{"a", "c"}}, Value: 1767225600.125}, {Labels: []Label{{"a", "d"}}, Value: -3}, {Labels: []Label{{"a", "e"}}, Value: 1e-9}}},
		{Name: "x_special", Help: "Special.", Type: Gauge, Samples: []Sample{
			{Labels: []Label{{"v", "inf"}}, Value: math.Inf(1)}, {Labels: []Label{{"v", "-inf"}}, Value: math.Inf(-1)}, {Labels: []Label{{"v", "nan"}}, Value: math.NaN()},
		}},
		{Name: "x_none", Help: "Nothing.", Type: Gauge},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# HELP x_pairs Pairs by state.
# TYPE x_pairs gauge
x_pairs{state="active",root="/r"} 2
x_pairs{state="reserved",root="/r"} 0
# HELP x_revisions_total Revisions.
# TYPE x_revisions_total counter
x_revisions_total 1234567
# HELP x_age_seconds Age.
# TYPE x_age_seconds gauge
x_age_seconds 0.25
x_age_seconds{a="b"} 1e+21
x_age_seconds{a="c"} 1767225600.125
x_age_seconds{a="d"} -3
x_age_seconds{a="e"} 1e-09
# HELP x_special Special.
# TYPE x_special gauge
x_special{v="inf"} +Inf
x_special{v="-inf"} -Inf
x_special{v="nan"} NaN
# HELP x_none Nothing.
# TYPE x_none gauge
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// Label values escape backslash, double quote and newline, and replace
// invalid UTF-8; help escapes backslash and newline (a quote stays).
func TestEscaping(t *testing.T) {
	var b strings.Builder
	err := Write(&b, []Family{{Name: "x", Help: "a \\ \"b\"\nc\xff", Type: Gauge, Samples: []Sample{
		{Labels: []Label{{"root", "/a\\b\"c\nd\xffe"}}, Value: 1},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "# HELP x a \\\\ \"b\"\\nc\uFFFD\n# TYPE x gauge\nx{root=\"/a\\\\b\\\"c\\nd\uFFFDe\"} 1\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// Write refuses what the format or its conventions do not allow, writing
// nothing, with an error that says what.
func TestWriteRefuses(t *testing.T) {
	one := []Sample{{Value: 1}}
	for _, tc := range []struct {
		name string
		fams []Family
		want string
	}{
		{"bad metric name", []Family{{Name: "1x", Help: "h", Type: Gauge}}, `"1x" is not a metric name`},
		{"empty metric name", []Family{{Name: "", Help: "h", Type: Gauge}}, `"" is not a metric name`},
		{"dash in name", []Family{{Name: "x-y", Help: "h", Type: Gauge}}, `"x-y" is not a metric name`},
		{"twice", []Family{{Name: "x", Help: "h", Type: Gauge}, {Name: "x", Help: "h", Type: Gauge}}, "metric x is given twice"},
		{"counter without _total", []Family{{Name: "x", Help: "h", Type: Counter}}, "counter x: a counter's name ends in _total"},
		{"gauge with _total", []Family{{Name: "x_total", Help: "h", Type: Gauge}}, "gauge x_total: only a counter's name ends in _total"},
		{"unknown type", []Family{{Name: "x", Help: "h", Type: "histogram"}}, `type "histogram" is neither`},
		{"no help", []Family{{Name: "x", Type: Gauge}}, "metric x has no help"},
		{"bad label", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"a:b", "v"}}}}}}, `"a:b" is not a label name`},
		{"reserved label", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"__name__", "v"}}}}}}, `"__name__" is not a label name`},
		{"label digit first", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"0a", "v"}}}}}}, `"0a" is not a label name`},
		{"label twice", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"a", "1"}, {"a", "2"}}}}}}, "label a is given twice"},
		{"same series", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"a", "1"}}}, {Labels: []Label{{"a", "1"}}}}}}, `two samples with the labels {a="1"}`},
		{"same unlabelled series", []Family{{Name: "x", Help: "h", Type: Gauge, Samples: append(one, one...)}}, "two samples with the labels {}"},
		{"negative counter", []Family{{Name: "x_total", Help: "h", Type: Counter, Samples: []Sample{{Value: -1}}}}, "a counter is never negative"},
		{"NaN counter", []Family{{Name: "x_total", Help: "h", Type: Counter, Samples: []Sample{{Value: math.NaN()}}}}, "a counter is never negative"},
	} {
		var b strings.Builder
		err := Write(&b, tc.fams)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: wrote %q", tc.name, b.String())
		}
	}
	// Names with colons are metric names; labels that differ only in
	// order are distinct series only when their values differ.
	if err := Check([]Family{{Name: "a:b_c", Help: "h", Type: Gauge, Samples: []Sample{{Labels: []Label{{"a", "1"}, {"b", "1"}}}, {Labels: []Label{{"a", "1"}, {"b", "2"}}}}}}); err != nil {
		t.Errorf("valid families refused: %v", err)
	}
}
