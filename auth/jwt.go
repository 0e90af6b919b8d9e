package auth

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"math"
	"strconv"
	"strings"
	"time"
)

// The JWT verification of the one form this service accepts: three
// base64url segments, signed with HMAC-SHA256 under the secret. It does by
// hand what golang-jwt does in general (RFC 7519; golang-jwt still signs
// the tokens, and the tests check the two against each other): the
// general parser decoded header and claims with reflection into maps and
// interfaces, and was most of a buy's cost for a buyer's first click.
//
// Kept because removing it costs more than a whole sale's run-to-run
// spread. Measured 2026-12-02 against golang-jwt's ParseWithClaims (typed
// claims, WithValidMethods HS256, WithExpirationRequired,
// WithStrictDecoding, behind the same verified-token cache), builds
// alternated four times each with MariaDB on a busy machine:
// `seckill bench --mode stream --users 20000 --stock 20000 --repeat 1
// --sold-out 0` (every request a first click) read 0.46–0.98× bare with
// this parser, 0.29–0.38× with golang-jwt, and 124–158 against 160–200 ms
// of CPU per 1,000 requests; `--users 20000 --repeat 2`, 89–122 against
// 114–128 ms. BenchmarkVerify/first: 1.2–1.9 µs, 3 allocs, against 11–18
// µs, 49 allocs. Figures: docs/benchmarks-history.md, Standard code on the buy route.

// hs256Header is the header golang-jwt writes for HS256,
// {"alg":"HS256","typ":"JWT"}: a token with it needs no header decoding.
const hs256Header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// sigLen is the length of an HS256 signature in base64url: 32 bytes.
const sigLen = 43

// maxTokenLen bounds what is decoded: a token of ours is about 150 bytes.
const maxTokenLen = 8 << 10

// b64 decodes the segments. Strict: a signature with other trailing bits
// is not the one computed (golang-jwt would accept it by default).
var b64 = base64.RawURLEncoding.Strict()

var errMalformed = errors.New("malformed token")

// macState is an HMAC keyed with the secret and scratch space for one
// verification, kept in Tokens.macs.
type macState struct {
	mac hash.Hash
	buf []byte // the token, then the decoded payload behind it
	sum []byte
	sig [32]byte
}

// tokenClaims are the claims Verify checks.
type tokenClaims struct {
	sub, role      string
	exp, nbf       time.Time
	hasExp, hasNbf bool
}

// parseToken checks token's form and signature and returns its claims; it
// does not check them. Every error means an invalid token.
func (t *Tokens) parseToken(token string) (tokenClaims, error) {
	if len(token) > maxTokenLen {
		return tokenClaims{}, errMalformed
	}
	header, rest, ok := strings.Cut(token, ".")
	if !ok {
		return tokenClaims{}, errMalformed
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || len(sig) != sigLen {
		return tokenClaims{}, errMalformed
	}
	m := t.macs.Get().(*macState)
	defer t.macs.Put(m)
	signed := len(header) + 1 + len(payload)
	m.buf = append(m.buf[:0], token...)
	if n, err := b64.Decode(m.sig[:], m.buf[signed+1:]); err != nil || n != len(m.sig) {
		return tokenClaims{}, errMalformed
	}
	m.mac.Reset()
	m.mac.Write(m.buf[:signed])
	m.sum = m.mac.Sum(m.sum[:0])
	if !hmac.Equal(m.sum, m.sig[:]) {
		return tokenClaims{}, errMalformed
	}
	// Signed with the secret: what follows reads only what we signed.
	if header != hs256Header {
		var h struct {
			Alg string `json:"alg"`
		}
		b, err := b64.DecodeString(header)
		if err != nil || json.Unmarshal(b, &h) != nil || h.Alg != "HS256" {
			return tokenClaims{}, errMalformed
		}
	}
	start := len(m.buf)
	m.buf = append(m.buf, make([]byte, b64.DecodedLen(len(payload)))...)
	n, err := b64.Decode(m.buf[start:], m.buf[len(header)+1:signed])
	if err != nil {
		return tokenClaims{}, errMalformed
	}
	b := m.buf[start : start+n]
	if c, ok := fastClaims(b); ok {
		return c, nil
	}
	return slowClaims(b)
}

// fastClaims reads the claims in the form tokens take: a flat JSON object
// of ASCII strings without escapes and integers. It reports false for
// anything else (or anything malformed), which slowClaims then reads with
// encoding/json: for what it reads, the two agree (FuzzClaims).
func fastClaims(b []byte) (c tokenClaims, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return c, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return c, skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := scanString(b, i)
		if !ok {
			return c, false
		}
		i = skipSpace(b, j)
		if i == len(b) || b[i] != ':' {
			return c, false
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "sub", "role":
			s, j, ok := scanString(b, i)
			if !ok {
				return c, false
			}
			if key[0] == 's' {
				c.sub = string(s)
			} else {
				c.role = string(s)
			}
			i = j
		case "exp", "nbf", "iat":
			n, j, ok := scanInt(b, i)
			if !ok {
				return c, false
			}
			switch key[0] {
			case 'e':
				c.exp, c.hasExp = time.Unix(n, 0), true
			case 'n':
				c.nbf, c.hasNbf = time.Unix(n, 0), true
			}
			i = j
		default:
			// encoding/json matches keys without regard to case: "Exp"
			// is exp there.
			for _, k := range [...]string{"sub", "role", "exp", "nbf", "iat"} {
				if strings.EqualFold(string(key), k) {
					return c, false
				}
			}
			if i < len(b) && b[i] == '"' {
				_, j, ok = scanString(b, i)
			} else {
				j, ok = scanNumber(b, i)
			}
			if !ok {
				return c, false
			}
			i = j
		}
		i = skipSpace(b, i)
		if i == len(b) {
			return c, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return c, skipSpace(b, i+1) == len(b)
		default:
			return c, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the string at b[i] and returns its contents and the
// index after it; false for anything but a string of printable ASCII
// without escapes.
func scanString(b []byte, i int) (s []byte, next int, ok bool) {
	if i == len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanInt reads the integer at b[i] (JSON's form: no leading zeros, at
// most 18 digits) and returns it and the index after it; false for
// anything else, a fraction or an exponent included.
func scanInt(b []byte, i int) (n int64, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}

// scanNumber skips the JSON number at b[i] and returns the index after it.
func scanNumber(b []byte, i int) (next int, ok bool) {
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}

// slowClaims reads the claims with encoding/json, as golang-jwt does:
// NumericDate's numbers in seconds, fractions cut to the second.
func slowClaims(b []byte) (tokenClaims, error) {
	var raw struct {
		Sub  string       `json:"sub"`
		Role string       `json:"role"`
		Exp  *json.Number `json:"exp"`
		Nbf  *json.Number `json:"nbf"`
		Iat  *json.Number `json:"iat"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return tokenClaims{}, errMalformed
	}
	c := tokenClaims{sub: raw.Sub, role: raw.Role}
	var err error
	if raw.Exp != nil {
		if c.exp, err = numericDate(*raw.Exp); err != nil {
			return tokenClaims{}, err
		}
		c.hasExp = true
	}
	if raw.Nbf != nil {
		if c.nbf, err = numericDate(*raw.Nbf); err != nil {
			return tokenClaims{}, err
		}
		c.hasNbf = true
	}
	if raw.Iat != nil {
		if _, err = numericDate(*raw.Iat); err != nil {
			return tokenClaims{}, err
		}
	}
	return c, nil
}

// numericDate reads a NumericDate (RFC 7519): seconds since the epoch,
// perhaps with a fraction, which is cut as golang-jwt cuts it.
func numericDate(n json.Number) (time.Time, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return time.Unix(i, 0), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > 1<<62 {
		return time.Time{}, errMalformed
	}
	round, frac := math.Modf(f)
	return time.Unix(int64(round), int64(frac*1e9)).Truncate(time.Second), nil
}
