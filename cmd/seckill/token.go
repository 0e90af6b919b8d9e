package main

import (
	"context"
	"fmt"
	"io"

	"github.com/seckill/seckill/auth"
)

func runToken(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c Config
		a tokenArgs
	)
	fs := newFlagSet("token")
	tokenFlags(fs, &c, &a)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	if a.user <= 0 {
		fmt.Fprintln(stderr, "seckill token: --user must be a positive user id")
		return errUsage
	}
	// Without a configured secret, sign with the embedded default's, so
	// that tokens work against a local `seckill serve` with no setup.
	secret, err := jwtSecret(&c, c.JWTSecret == "")
	if err != nil {
		return err
	}
	tokens, err := auth.NewTokens(secret)
	if err != nil {
		return err
	}
	token, err := tokens.Mint(auth.Identity{UserID: a.user, Admin: a.admin}, c.TokenTTL)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}

// tokenArgs are token's own flags.
type tokenArgs struct {
	user  int64
	admin bool
}

// tokenFlags registers token's flags. The lifetime is serve's --token-ttl,
// under the same name and variable; --ttl and SECKILL_TTL are its old names.
func tokenFlags(fs *flagSet, c *Config, a *tokenArgs) {
	fs.Int64Var(&a.user, "user", 0, "user id the token is for (required)")
	fs.BoolVar(&a.admin, "admin", false, "make an admin token")
	c.tokenTTLFlag(fs.FlagSet, "token lifetime")
	fs.alias("ttl", "token-ttl")
	c.secretFlags(fs.FlagSet)
	fs.StringVar(&c.DataDir, "data-dir", "seckill-data", "where the embedded default keeps its generated JWT secret, used when --jwt-secret is empty")
}
