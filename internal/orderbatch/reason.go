package orderbatch

import "strings"

// MaxReasonLen is how many characters (runes) of a failed order's reason the
// stores keep: the size of their reason columns.
const MaxReasonLen = 500

// Reason returns the reason to store for a failed order: valid UTF-8 without
// NUL, cut to its first MaxReasonLen characters. A reason is made of error
// messages that may quote anything, and a byte that one database refuses
// (PostgreSQL takes neither invalid UTF-8 nor NUL in text) must not keep a
// failed order from being recorded; each such byte or sequence becomes
// U+FFFD.
func Reason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	n := 0
	for i := range s {
		if n == MaxReasonLen {
			return s[:i]
		}
		n++
	}
	return s
}
