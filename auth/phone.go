package auth

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/seckill/seckill"
)

// Phone numbers are kept in E.164 form, "+" and at most 15 digits, the
// first not 0, so that one number typed two ways is one code and one user.
const (
	// minPhoneDigits: the shortest numbers in use (Niue's: +683 and four
	// digits) have 7 digits with their country code.
	minPhoneDigits = 7
	maxPhoneDigits = 15
	// maxPhoneInput bounds the text read as a phone number: separators
	// allow more than 15 characters, but not a page.
	maxPhoneInput = 64
)

// NormalizePhone returns phone in E.164 form, "+<country code><number>".
//
// It accepts what people type: spaces, dashes, dots and parentheses
// between the digits, "00" for the leading "+", and "(0)" (the trunk
// prefix some write after the country code, as in +44 (0)20 7946 0000)
// left out. A number with neither "+" nor "00" carries no country code:
// with countryCode (its digits, as ParseCountryCode returns them) it is
// a number of that country, its one leading 0 (the trunk prefix) dropped;
// with countryCode empty it is refused. Anything else is ErrInvalidArgument.
func NormalizePhone(phone, countryCode string) (string, error) {
	s := strings.TrimSpace(phone)
	if len(s) > maxPhoneInput {
		return "", phoneError()
	}
	s = strings.Replace(s, "(0)", "", 1)
	s, international := strings.CutPrefix(s, "+")
	digits, ok := phoneDigits(s)
	if !ok {
		return "", phoneError()
	}
	if !international {
		if national, ok := strings.CutPrefix(digits, "00"); ok {
			digits, international = national, true
		}
	}
	if !international {
		if countryCode == "" {
			return "", seckill.Errorf(seckill.ErrInvalidArgument, "phone: include the country code, as in +86 138 0013 8000")
		}
		digits = countryCode + strings.TrimPrefix(digits, "0")
	}
	if len(digits) < minPhoneDigits || len(digits) > maxPhoneDigits || digits[0] == '0' {
		return "", phoneError()
	}
	return "+" + digits, nil
}

// phoneDigits returns the digits of s, skipping the separators people
// write between them; ok is false if s holds anything else.
func phoneDigits(s string) (digits string, ok bool) {
	var b strings.Builder
	b.Grow(len(s))
	for _, c := range s {
		switch {
		case '0' <= c && c <= '9':
			b.WriteRune(c)
		case c == '-' || c == '.' || c == '(' || c == ')' || unicode.IsSpace(c):
		default:
			return "", false
		}
	}
	return b.String(), true
}

func phoneError() error {
	return seckill.Errorf(seckill.ErrInvalidArgument, "phone: must be a phone number with its country code: '+' (or 00) and at most 15 digits")
}

// ParseCountryCode reads a country calling code, with or without its
// "+": 1 to 3 digits, the first not 0. It returns the digits; an empty
// code is valid and stays empty (no default country).
func ParseCountryCode(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	cc := strings.TrimPrefix(s, "+")
	if len(cc) < 1 || len(cc) > 3 || cc[0] == '0' || strings.Trim(cc, "0123456789") != "" {
		return "", fmt.Errorf("auth: country code %q: want 1 to 3 digits, the first not 0, as 86 or +44", s)
	}
	return cc, nil
}

// LegacyPhones returns the forms in which the login before phone
// normalisation may have stored the number e164 (as NormalizePhone returns
// it, with the same countryCode). That login kept a phone as typed: 6 to 15
// digits after an optional "+". A stored form is e164's if NormalizePhone
// reads it as e164 today, so that the buyer who typed it then is the buyer
// who types it now: the "00" form, and with a country code the national
// number, with or without its trunk 0. Digits stored without a country code
// where none is configured name no number today, and are not returned.
func LegacyPhones(e164, countryCode string) []string {
	digits, ok := strings.CutPrefix(e164, "+")
	if !ok {
		return nil
	}
	forms := []string{"00" + digits}
	if countryCode != "" {
		if national, ok := strings.CutPrefix(digits, countryCode); ok {
			forms = append(forms, national, "0"+national)
		}
	}
	legacy := forms[:0]
	for _, f := range forms {
		if !legacyPhone(f) {
			continue
		}
		if n, err := NormalizePhone(f, countryCode); err == nil && n == e164 {
			legacy = append(legacy, f)
		}
	}
	return legacy
}

// legacyPhone reports whether the login before normalisation took s: 6 to
// 15 digits after an optional "+".
func legacyPhone(s string) bool {
	d := strings.TrimPrefix(s, "+")
	return len(d) >= 6 && len(d) <= 15 && strings.Trim(d, "0123456789") == ""
}
