package seckill

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The challenge's outcomes a client acts on, mapped to HTTP
// statuses with the other sentinel errors.
var (
	// ErrChallengeRequired says the voucher asks for a solved challenge
	// and the buy carried none.
	ErrChallengeRequired = errors.New("challenge required")
	// ErrChallengeInvalid says the buy's solution is not accepted: forged,
	// malformed, expired, another buyer's or voucher's, or used already.
	ErrChallengeInvalid = errors.New("challenge invalid")
)

// ChallengeAlgorithm is the hash of every challenge: ALTCHA's "SHA-256",
// the one its widget and every ALTCHA client solve.
const ChallengeAlgorithm = "SHA-256"

// MaxChallengeNumber bounds a challenge's maxnumber: the work a buyer may
// be asked for, and what the verifier accepts as a number.
const MaxChallengeNumber = 10_000_000

// Challenge is an ALTCHA challenge (protocol v1) as the API hands it out:
// find the number n in [0, MaxNumber] such that the hex SHA-256 of Salt
// followed by n in decimal is Challenge. Signature is the hex
// HMAC-SHA256 of Challenge under the server's key, so that any instance
// verifies a solution without having kept the challenge.
type Challenge struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	MaxNumber int64  `json:"maxnumber"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// Solution is an ALTCHA payload: the challenge and the number that solves
// it. A buy carries it as base64 JSON in the X-Altcha header.
type Solution struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	Number    int64  `json:"number"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// ChallengeClaims are what a challenge's salt binds it to: the buyer and
// the voucher it was issued for, and when it expires. The salt is hashed
// into the challenge, which is signed: changing a claim breaks both.
type ChallengeClaims struct {
	UserID    int64
	VoucherID int64
	Expires   time.Time
}

// ChallengeKey derives the key that signs challenges from a server secret
// (the token secret every instance shares), so that challenges need no
// secret of their own and a token key is never used for two purposes.
func ChallengeKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("seckill altcha challenge key v1"))
	return m.Sum(nil)
}

// NewChallenge makes a challenge for the claims, with a secret number
// drawn uniformly from [0, maxNumber] (from rnd; nil is crypto/rand).
//
// The salt is 12 random bytes in hex, then the claims as URL query
// parameters, closed by "&": "…?expires=…&user=…&voucher=…&". The closing
// "&" matters. The hash is of salt and number concatenated, so without a
// delimiter a client could move the number's leading digits into the
// salt's last parameter (expires=17000000001, number 23 hashes as
// expires=1700000000, number 123) and forge a later expiry.
func NewChallenge(key []byte, c ChallengeClaims, maxNumber int64, rnd io.Reader) (Challenge, error) {
	if maxNumber < 1 || maxNumber > MaxChallengeNumber {
		return Challenge{}, fmt.Errorf("new challenge: maxnumber %d out of [1, %d]", maxNumber, MaxChallengeNumber)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	var b [12]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return Challenge{}, fmt.Errorf("new challenge: salt: %w", err)
	}
	n, err := rand.Int(rnd, big.NewInt(maxNumber+1))
	if err != nil {
		return Challenge{}, fmt.Errorf("new challenge: number: %w", err)
	}
	salt := hex.EncodeToString(b[:]) + "?expires=" + strconv.FormatInt(c.Expires.Unix(), 10) +
		"&user=" + strconv.FormatInt(c.UserID, 10) + "&voucher=" + strconv.FormatInt(c.VoucherID, 10) + "&"
	sum := challengeHash(salt, n.Int64())
	return Challenge{
		Algorithm: ChallengeAlgorithm,
		Challenge: sum,
		MaxNumber: maxNumber,
		Salt:      salt,
		Signature: challengeSignature(key, sum),
	}, nil
}

// challengeHash is the hex SHA-256 of salt followed by number in decimal.
func challengeHash(salt string, number int64) string {
	h := sha256.New()
	io.WriteString(h, salt)
	var digits [20]byte
	h.Write(strconv.AppendInt(digits[:0], number, 10))
	return hex.EncodeToString(h.Sum(nil))
}

// challengeSignature is the hex HMAC-SHA256 of challenge under key.
func challengeSignature(key []byte, challenge string) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, challenge)
	return hex.EncodeToString(m.Sum(nil))
}

// maxSolutionHeader bounds the X-Altcha header read: a real solution is
// about 300 bytes of base64.
const maxSolutionHeader = 1024

// ParseSolution reads an X-Altcha header: base64 (standard, with or
// without padding) of the solution's JSON. A malformed one is
// ErrChallengeInvalid; an empty one, ErrChallengeRequired.
func ParseSolution(header string) (Solution, error) {
	if header == "" {
		return Solution{}, Errorf(ErrChallengeRequired, "this voucher asks for a solved challenge: GET /api/vouchers/{id}/challenge, solve it, and send the solution in the X-Altcha header")
	}
	if len(header) > maxSolutionHeader {
		return Solution{}, Errorf(ErrChallengeInvalid, "X-Altcha: longer than %d bytes", maxSolutionHeader)
	}
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(header)
	}
	if err != nil {
		return Solution{}, Errorf(ErrChallengeInvalid, "X-Altcha: not base64")
	}
	var s Solution
	if err := json.Unmarshal(raw, &s); err != nil {
		return Solution{}, Errorf(ErrChallengeInvalid, "X-Altcha: not an ALTCHA solution's JSON")
	}
	return s, nil
}

// VerifySolution checks a solution against the key and returns the claims
// its salt carries: the algorithm is SHA-256, the number solves the
// challenge, the signature is the key's, and the salt is one NewChallenge
// makes and not expired at now. Any failure is ErrChallengeInvalid. It
// does not check the claims' buyer and voucher, nor that the solution is
// fresh: the caller does ([ChallengeService.Check]).
func VerifySolution(key []byte, s Solution, now time.Time) (ChallengeClaims, error) {
	invalid := func(why string) (ChallengeClaims, error) {
		return ChallengeClaims{}, Errorf(ErrChallengeInvalid, "challenge solution %s", why)
	}
	if s.Algorithm != ChallengeAlgorithm {
		return invalid("uses an algorithm other than " + ChallengeAlgorithm)
	}
	if s.Number < 0 || s.Number > MaxChallengeNumber {
		return invalid("has a number out of range")
	}
	if len(s.Challenge) != sha256.Size*2 || len(s.Signature) != sha256.Size*2 {
		return invalid("is malformed")
	}
	// Both compared in constant time: the signature is a MAC, and the
	// challenge is compared before it only to spare the HMAC on garbage.
	if subtle.ConstantTimeCompare([]byte(challengeHash(s.Salt, s.Number)), []byte(strings.ToLower(s.Challenge))) != 1 {
		return invalid("does not solve its challenge")
	}
	if !hmac.Equal([]byte(challengeSignature(key, strings.ToLower(s.Challenge))), []byte(strings.ToLower(s.Signature))) {
		return invalid("is not signed by this service")
	}
	c, err := parseChallengeSalt(s.Salt)
	if err != nil {
		return invalid("has a salt this service did not make")
	}
	if !now.Before(c.Expires) {
		return invalid("has expired: get a new challenge")
	}
	return c, nil
}

// parseChallengeSalt reads the claims from a salt NewChallenge made.
func parseChallengeSalt(salt string) (ChallengeClaims, error) {
	_, query, ok := strings.Cut(salt, "?")
	if !ok || !strings.HasSuffix(query, "&") {
		return ChallengeClaims{}, errors.New("no claims")
	}
	q, err := url.ParseQuery(strings.TrimSuffix(query, "&"))
	if err != nil {
		return ChallengeClaims{}, err
	}
	num := func(name string) (int64, error) {
		vs := q[name]
		if len(vs) != 1 {
			return 0, fmt.Errorf("%s: want one value", name)
		}
		return strconv.ParseInt(vs[0], 10, 64)
	}
	exp, err := num("expires")
	if err != nil {
		return ChallengeClaims{}, err
	}
	user, err := num("user")
	if err != nil {
		return ChallengeClaims{}, err
	}
	voucher, err := num("voucher")
	if err != nil {
		return ChallengeClaims{}, err
	}
	return ChallengeClaims{UserID: user, VoucherID: voucher, Expires: time.Unix(exp, 0)}, nil
}

// SolveChallenge finds the challenge's number as a buyer's client does,
// trying 0, 1, 2, … up to MaxNumber; ctx stops it. The load generator
// (seckill bench --challenge) and the tests solve with it.
func SolveChallenge(ctx context.Context, c Challenge) (Solution, error) {
	if c.Algorithm != ChallengeAlgorithm {
		return Solution{}, fmt.Errorf("solve challenge: algorithm %q, want %q", c.Algorithm, ChallengeAlgorithm)
	}
	want, err := hex.DecodeString(c.Challenge)
	if err != nil || len(want) != sha256.Size {
		return Solution{}, fmt.Errorf("solve challenge: challenge %q is not a hex SHA-256", c.Challenge)
	}
	prefix := []byte(c.Salt)
	buf := make([]byte, 0, len(prefix)+20)
	buf = append(buf, prefix...)
	for n := int64(0); n <= c.MaxNumber; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return Solution{}, fmt.Errorf("solve challenge: %w", ctx.Err())
		}
		sum := sha256.Sum256(strconv.AppendInt(buf[:len(prefix)], n, 10))
		if bytes.Equal(sum[:], want) {
			return Solution{Algorithm: c.Algorithm, Challenge: c.Challenge, Number: n, Salt: c.Salt, Signature: c.Signature}, nil
		}
	}
	return Solution{}, fmt.Errorf("solve challenge: no number up to %d solves it", c.MaxNumber)
}

// Header encodes the solution as a buy's X-Altcha header carries it.
func (s Solution) Header() string {
	b, _ := json.Marshal(s) // a struct of strings and an int: cannot fail
	return base64.StdEncoding.EncodeToString(b)
}
