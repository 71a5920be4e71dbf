package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Recorded strings (proof refs, writtenAt, unit names, host ids, damage
// reasons that quote a record, file names found under the root) come from
// files anyone with write access to the root — or a bug — may have
// written. Printed raw, a terminal escape could repaint the screen and a
// newline could forge a line of `log` or `show`. Human output therefore
// escapes them, as keys are already printed with %q.

// printable reports whether every rune of s is valid UTF-8 and printable
// (unicode.IsPrint: no control, format — bidi overrides included — or
// invalid bytes; the only space allowed is U+0020).
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// esc is one recorded value for human output: as is when it is printable
// and holds no quote or backslash, else Go-quoted ("a\nb", "\x1b[2J",
// "\xff"), so that a quoted value is never mistaken for a plain one.
func esc(s string) string {
	if printable(s) && !strings.ContainsAny(s, `"\`) {
		return s
	}
	return strconv.Quote(s)
}

// escText escapes, inside a sentence that may embed recorded values, every
// rune that is not printable (newlines and tabs included) and every invalid
// byte, as \n, \t, \x1b, \u202e or \xff: the sentence stays on its line and
// cannot move the cursor.
func escText(s string) string {
	if printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // 'x' with the escape inside
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// escJSONText escapes a whole JSON text (a record as stored, for log
// --full) for a terminal: inside a valid JSON text, a non-printable rune can
// only be white space between tokens or a raw character inside a string, so
// writing it as \uXXXX keeps the JSON valid and equal in meaning, while an
// invalid byte is written as \xNN (the text is then no longer JSON, which a
// damaged revision already is not).
func escJSONText(data []byte) string {
	var b strings.Builder
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, data[i])
		case r == ' ' || r == '\t' || unicode.IsPrint(r):
			b.Write(data[i : i+size])
		case r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r > 0xffff:
			r1, r2 := utf16Pair(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

// validJSON returns raw JSON as valid UTF-8. encoding/json writes strings
// with every invalid byte replaced by U+FFFD, but copies a json.RawMessage
// (a record as stored, an owner's incarnation) byte for byte; JSON.parse
// and encoding/json decode an invalid byte inside a string as U+FFFD, so
// writing U+FFFD here gives a reader exactly what decoding the record
// gives.
func validJSON(raw json.RawMessage) json.RawMessage {
	if raw == nil || utf8.Valid(raw) {
		return raw
	}
	return bytes.ToValidUTF8(raw, []byte("\uFFFD"))
}

// maxProofRef bounds a proof reference given on the command line: it names
// a supervisor's cohort proof or a boot proof, and is printed on one line.
const maxProofRef = 256

// checkProofRef validates a proof reference given on the command line.
func checkProofRef(flagValue, ref string) error {
	switch {
	case len(ref) > maxProofRef:
		return usagef("--proof %s: REF is %d bytes; at most %d", quotePrefix(flagValue), len(ref), maxProofRef)
	case !utf8.ValidString(ref):
		return usagef("--proof %s: REF is not valid UTF-8", quotePrefix(flagValue))
	case !printable(ref):
		return usagef("--proof %s: REF must be printable text (no control characters, newlines or format characters)", quotePrefix(flagValue))
	}
	return nil
}
