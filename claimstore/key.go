package claimstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Kind names the two kinds of key. A key's directory lives under <root>/<kind>.
type Kind = storage.Kind

const (
	KindSeat    = storage.KindSeat
	KindSession = storage.KindSession
)

// MaxKeyValueLen bounds each value of a key, in bytes. Values are hashed, not
// used as file names, so the bound is about keeping records and messages sane.
const MaxKeyValueLen = 4096

// Key names one of the two things a writer claim holds: a seat (seat,
// project, workspace) or a session. Build keys with SeatKey and SessionKey,
// which validate; the zero Key is invalid.
type Key struct {
	Kind      Kind
	Seat      string // seat keys only
	Project   string // seat keys only
	Workspace string // seat keys only
	Session   string // session keys only
}

// SeatKey returns the key of a seat. Every value must be a non-empty string
// of valid UTF-8, without NUL, at most MaxKeyValueLen bytes; otherwise the
// error is a *KeyError naming the bad value.
func SeatKey(seat, project, workspace string) (Key, error) {
	k := Key{Kind: KindSeat, Seat: seat, Project: project, Workspace: workspace}
	return k, k.Validate()
}

// SessionKey returns the key of a session, validated as SeatKey's values are.
func SessionKey(session string) (Key, error) {
	k := Key{Kind: KindSession, Session: session}
	return k, k.Validate()
}

// members returns the key's members in the order the on-disk format fixes.
func (k Key) members() [][2]string {
	switch k.Kind {
	case KindSeat:
		return [][2]string{{"kind", string(KindSeat)}, {"seat", k.Seat}, {"project", k.Project}, {"workspace", k.Workspace}}
	case KindSession:
		return [][2]string{{"kind", string(KindSession)}, {"session", k.Session}}
	}
	return nil
}

// Validate reports whether k is a well-formed key.
func (k Key) Validate() error {
	var ms [][2]string
	switch k.Kind {
	case KindSeat:
		if k.Session != "" {
			return &KeyError{Field: "session", Value: k.Session, Reason: "a seat key has no session"}
		}
		ms = k.members()
	case KindSession:
		if k.Seat != "" || k.Project != "" || k.Workspace != "" {
			return &KeyError{Field: "seat", Value: k.Seat, Reason: "a session key has no seat, project or workspace"}
		}
		ms = k.members()
	default:
		return &KeyError{Field: "kind", Value: string(k.Kind), Reason: `kind must be "seat" or "session"`}
	}
	for _, m := range ms[1:] {
		if err := validValue(m[0], m[1]); err != nil {
			return err
		}
	}
	return nil
}

func validValue(field, v string) error {
	switch {
	case v == "":
		return &KeyError{Field: field, Value: v, Reason: "must not be empty"}
	case len(v) > MaxKeyValueLen:
		return &KeyError{Field: field, Value: v, Reason: fmt.Sprintf("is more than the %d bytes a key value may have", MaxKeyValueLen)}
	case !utf8.ValidString(v):
		return &KeyError{Field: field, Value: v, Reason: "is not valid UTF-8"}
	case strings.IndexByte(v, 0) >= 0:
		return &KeyError{Field: field, Value: v, Reason: "contains a NUL byte"}
	}
	return nil
}

// JSON returns the key serialised exactly as ECMAScript JSON.stringify does
// it, which is what the on-disk format hashes and stores. It differs from
// encoding/json: no HTML escaping, U+2028 and U+2029 literal, and control
// characters escaped as \uXXXX with lowercase hex.
func (k Key) JSON() []byte {
	ms := k.members()
	// Sized for the usual key (nothing to escape): one allocation, where
	// growing by appends took four, and every Loc computes a key's JSON.
	size := 2
	for _, m := range ms {
		size += len(m[0]) + len(m[1]) + 6
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSString(b, m[0])
		b = append(b, ':')
		b = appendJSString(b, m[1])
	}
	return append(b, '}')
}

// appendJSString appends s as JSON.stringify quotes a string. s must be
// valid UTF-8 (keys are validated; a lone surrogate cannot occur).
func appendJSString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	// Runs of bytes that need no escape are copied whole: every record
	// and every key hash passes through here.
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		start = i + 1
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Hash returns the name of the key's directory: the first 32 lowercase hex
// digits of SHA-256 over k.JSON().
func (k Key) Hash() string {
	sum := sha256.Sum256(k.JSON())
	return hex.EncodeToString(sum[:16])
}

// String returns a short human form, for messages.
//
// Keys are bytes, compared as written (as the reference compares them):
// "caf\u00e9" and "cafe\u0301" are two seats that a terminal draws alike.
// So that distinct keys never print alike, each value is quoted with
// combining marks, format characters and every space but U+0020 escaped
// (quoteKey), and a key holding any non-ASCII character is followed by the
// first 8 digits of its hash: `seat "café" (…) [h:1f2e3d4c]`. Nothing is
// ever normalised.
func (k Key) String() string {
	var s string
	switch k.Kind {
	case KindSeat:
		s = "seat " + quoteKey(k.Seat) + " (project " + quoteKey(k.Project) + ", workspace " + quoteKey(k.Workspace) + ")"
	case KindSession:
		s = "session " + quoteKey(k.Session)
	default:
		return fmt.Sprintf("invalid key of kind %q", k.Kind)
	}
	if !isASCII(k.Seat + k.Project + k.Workspace + k.Session) {
		s += " [h:" + k.Hash()[:8] + "]"
	}
	return s
}

// quoteKey is strconv.Quote, also escaping what draws like something else
// or like nothing: combining marks (a base letter plus U+0301 draws as the
// precomposed letter), format characters (zero-width joiners, bidi
// controls) and spaces other than U+0020 (a no-break space draws as one).
func quoteKey(v string) string {
	q := strconv.Quote(v)
	if isASCII(v) {
		return q
	}
	var b strings.Builder
	for _, r := range q {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case unicode.In(r, unicode.M, unicode.Cf) || unicode.IsSpace(r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
