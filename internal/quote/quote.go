package quote

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Max is how many bytes of a value a message quotes.
const Max = 40

// Prefix quotes v as strconv.Quote does (every byte that is not printable
// is escaped), at most its first Max bytes, cut on a rune boundary and
// followed by "…" and v's length in bytes when v is longer. It is safe for
// any string, valid UTF-8 or not.
func Prefix(v string) string {
	if len(v) <= Max {
		return strconv.Quote(v)
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(v[:cut]), len(v))
}
