package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill/seckill"
)

// Rules for login codes.
const (
	// CodeTTL is how long a login code stays valid.
	CodeTTL = 5 * time.Minute
	// CodeCooldown is how long a phone waits before it can get a new code.
	CodeCooldown = time.Minute
	// CodeTries is how many wrong codes void a code.
	CodeTries = 5
)

// IssueCode stores code as the phone's login code for CodeTTL, unless a code
// was issued for the phone within CodeCooldown: then it changes nothing and
// issued is false.
func (c *Client) IssueCode(ctx context.Context, phone, code string) (issued bool, err error) {
	k := c.keys.login(phone)
	wait, err := issueCodeScript.runInt(ctx, c, "issue login code",
		[]string{k.Code, k.Tries, k.Cooldown}, args{code, ms(CodeTTL), ms(CodeCooldown)})
	return err == nil && wait == 0, err
}

// wrongCode is the one answer to a code that did not log in, whether it was
// wrong, used, expired, voided or never issued: another would tell whether
// the phone has a code outstanding.
const wrongCode = "the code is wrong, used or expired; check it, or ask for a new one"

// RedeemCode consumes the phone's code if code matches it.
func (c *Client) RedeemCode(ctx context.Context, phone, code string) error {
	k := c.keys.login(phone)
	n, err := redeemCodeScript.runInt(ctx, c, "redeem login code", []string{k.Code, k.Tries}, args{code, strconv.Itoa(CodeTries)})
	if err != nil {
		return err
	}
	if n != 0 {
		return seckill.Errorf(seckill.ErrUnauthorized, wrongCode)
	}
	return nil
}

// WithdrawCode takes back the phone's code if it is still code, with the
// phone's cooldown: for a code that could not be sent, which must not stay
// usable and must not make the phone wait.
func (c *Client) WithdrawCode(ctx context.Context, phone, code string) error {
	k := c.keys.login(phone)
	if err := withdrawCodeScript.run(ctx, c, []string{k.Code, k.Tries, k.Cooldown}, args{code}).Error(); err != nil {
		return redisErr("withdraw login code", err)
	}
	return nil
}

// SpendGuess counts a login attempt against the allowances of lim, kept in
// Redis so that they bound every instance together.
func (c *Client) SpendGuess(ctx context.Context, client string, lim seckill.GuessLimits) error {
	if !lim.On() {
		return nil
	}
	perClient := lim.PerClient
	if client == "" {
		perClient = 0
	}
	k := c.keys.guesses(client)
	res, err := spendGuessScript.run(ctx, c, []string{k.Global, k.Client},
		args{strconv.FormatInt(max(lim.Global, 0), 10), strconv.FormatInt(max(perClient, 0), 10), ms(lim.Window)}).ToArray()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("spend_guess answered %d values, want 2", len(res))
	}
	var (
		wait int64
		who  string
	)
	if err == nil {
		wait, err = res[0].AsInt64()
	}
	if err == nil {
		who, err = res[1].ToString()
	}
	if err != nil {
		return redisErr("count a login attempt", err)
	}
	if wait <= 0 {
		return nil
	}
	msg := "too many wrong login codes from this address; try again later"
	if who == "global" {
		msg = "too many wrong login codes on this service; try again later"
	}
	return &seckill.Error{Kind: seckill.ErrRateLimited, Message: msg, RetryAfter: time.Duration(wait) * time.Millisecond}
}

// RefundGuess gives back an attempt SpendGuess counted.
func (c *Client) RefundGuess(ctx context.Context, client string) error {
	k := c.keys.guesses(client)
	if err := refundGuessScript.run(ctx, c, []string{k.Global, k.Client}, nil).Error(); err != nil {
		return redisErr("give back a login attempt", err)
	}
	return nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
