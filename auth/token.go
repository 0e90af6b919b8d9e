// Package auth proves who a request acts for: JSON Web Tokens signed with
// HS256, and the phone-code login that hands them out.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill"
)

// MinSecretLen is the shortest signing secret accepted: HS256 with fewer
// than 256 bits of key is open to offline guessing.
const MinSecretLen = 32

// RoleAdmin is the value of the "role" claim that admits a token to the
// admin routes.
const RoleAdmin = "admin"

// Identity is who a request acts for.
type Identity struct {
	UserID int64
	Admin  bool
}

// claims are the token's claims: sub is the user id as a decimal string.
type claims struct {
	jwt.RegisteredClaims
	Role string `json:"role,omitempty"`
}

// Tokens mints and verifies tokens with one secret.
type Tokens struct {
	secret []byte
	// Now returns the current time; tests replace it.
	Now func() time.Time

	// macs holds HMAC-SHA256 states keyed with the secret, with scratch
	// space, so that verifying a token allocates nothing.
	macs sync.Pool
	// verified remembers tokens already verified, to their expiry: in a
	// flash sale each buyer clicks again and again.
	verified verifiedCache
}

// NewTokens returns Tokens that sign with secret, which must be at least
// MinSecretLen bytes.
func NewTokens(secret []byte) (*Tokens, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("auth: the JWT secret is %d bytes; it must be at least %d", len(secret), MinSecretLen)
	}
	secret = bytes.Clone(secret)
	t := &Tokens{secret: secret, Now: time.Now}
	t.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, secret)} }
	t.verified.init()
	return t, nil
}

// Mint returns a token for id that expires after ttl.
func (t *Tokens) Mint(id Identity, ttl time.Duration) (string, error) {
	if id.UserID <= 0 {
		return "", fmt.Errorf("auth: user id %d is not positive", id.UserID)
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: token lifetime %v is not positive", ttl)
	}
	now := t.Now()
	c := claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(id.UserID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if id.Admin {
		c.Role = RoleAdmin
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}

// Verify checks the token's signature, algorithm (HS256 only), expiry and
// subject, and returns whom it names. Every failure is ErrUnauthorized.
//
// A token verified before and not expired is answered from a bounded cache
// (see verifiedCache); any other is parsed and checked in full by
// parseToken, by hand for the one algorithm accepted: golang-jwt's general
// parser cost more than the rest of a sold-out answer.
func (t *Tokens) Verify(token string) (Identity, error) {
	now := t.Now()
	if id, ok := t.verified.get(token, now); ok {
		return id, nil
	}
	c, err := t.parseToken(token)
	switch {
	case err != nil:
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "invalid token")
	case !c.hasExp:
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token has no expiry")
	case !now.Before(c.exp):
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token has expired")
	case c.hasNbf && now.Before(c.nbf):
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "invalid token")
	}
	id, err := strconv.ParseInt(c.sub, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.sub {
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token subject is not a user id")
	}
	ident := Identity{UserID: id, Admin: c.role == RoleAdmin}
	t.verified.put(token, ident, c.exp, now)
	return ident, nil
}
