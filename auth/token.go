// Package auth proves who a request acts for: JSON Web Tokens signed with
// HS256, and the phone-code login that hands them out.
package auth

import (
	"errors"
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
	parser *jwt.Parser
	// Now returns the current time; tests replace it.
	Now func() time.Time

	// verified remembers tokens already verified, to their expiry: in a
	// flash sale each buyer clicks again and again, and checking the
	// signature each time would cost more than answering. The key is the
	// whole token, signature included, so a forged token never hits.
	mu       sync.RWMutex
	verified map[string]verified
}

// verified is a token's identity and when it expires.
type verified struct {
	id  Identity
	exp time.Time
}

// maxVerified bounds the memory of verified tokens (about 50 MB at most);
// when full it is emptied and fills again.
const maxVerified = 200_000

// NewTokens returns Tokens that sign with secret, which must be at least
// MinSecretLen bytes.
func NewTokens(secret []byte) (*Tokens, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("auth: the JWT secret is %d bytes; it must be at least %d", len(secret), MinSecretLen)
	}
	t := &Tokens{secret: secret, Now: time.Now, verified: map[string]verified{}}
	t.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return t.Now() }),
	)
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
func (t *Tokens) Verify(token string) (Identity, error) {
	t.mu.RLock()
	v, ok := t.verified[token]
	t.mu.RUnlock()
	if ok && t.Now().Before(v.exp) {
		return v.id, nil
	}
	var c claims
	_, err := t.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return t.secret, nil })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token has expired")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token has no expiry")
	case err != nil:
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "invalid token")
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.Subject {
		return Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "token subject is not a user id")
	}
	ident := Identity{UserID: id, Admin: c.Role == RoleAdmin}
	t.mu.Lock()
	if len(t.verified) >= maxVerified {
		clear(t.verified)
	}
	t.verified[token] = verified{id: ident, exp: c.ExpiresAt.Time}
	t.mu.Unlock()
	return ident, nil
}
