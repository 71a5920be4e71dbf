package unitprobe

import (
	"errors"
	"fmt"
	"strings"

	"github.com/claimstore/claimstore/internal/quote"
)

// MaxNameLen is the longest unit name systemd accepts (UNIT_NAME_MAX - 1).
const MaxNameLen = 255

// unitTypes are the suffixes systemd knows, without the dot.
var unitTypes = map[string]bool{
	"service": true, "socket": true, "target": true, "device": true,
	"mount": true, "automount": true, "swap": true, "timer": true,
	"path": true, "slice": true, "scope": true,
}

// ErrInvalidName is wrapped by every error of ValidateName.
var ErrInvalidName = errors.New("invalid unit name")

// ValidateName reports whether name is a systemd unit name that can name a
// unit with processes: "prefix.type" or "prefix@instance.type", with type one
// of systemd's unit types, prefix and instance non-empty and made of
// [A-Za-z0-9:_.\-] (the instance may also hold '@'), at most MaxNameLen
// bytes. Templates ("foo@.service") are refused: a template is never
// running, only its instances are, so looking one up is a caller's mistake.
// The error wraps ErrInvalidName.
func ValidateName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidName, quote.Prefix(name), why)
	}
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxNameLen {
		return bad(fmt.Sprintf("%d bytes, longer than %d", len(name), MaxNameLen))
	}
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return bad("no unit type suffix such as .service")
	}
	if !unitTypes[name[dot+1:]] {
		return bad(fmt.Sprintf("unknown unit type %q", name[dot+1:]))
	}
	stem := name[:dot]
	if stem == "" {
		return bad("empty name before the type suffix")
	}
	for i := 0; i < len(stem); i++ {
		if !validChar(stem[i]) && stem[i] != '@' {
			return bad(fmt.Sprintf("character %q at offset %d is not allowed", stem[i], i))
		}
	}
	// The first '@' separates prefix and instance, as in systemd.
	if at := strings.IndexByte(stem, '@'); at >= 0 {
		switch {
		case at == 0:
			return bad("empty prefix before '@'")
		case at == len(stem)-1:
			return bad("a template has no processes; look up an instance (name@instance.type)")
		}
	}
	return nil
}

func validChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte(":-_.\\", c) >= 0
}
