package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/seckill/seckill/auth"
)

func runToken(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c     Config
		user  int64
		admin bool
		ttl   time.Duration
	)
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	c.secretFlags(fs)
	fs.StringVar(&c.DataDir, "data-dir", "seckill-data", "where the embedded default keeps its generated JWT secret, used when --jwt-secret is empty")
	fs.Int64Var(&user, "user", 0, "user id the token is for (required)")
	fs.BoolVar(&admin, "admin", false, "make an admin token")
	fs.DurationVar(&ttl, "ttl", 24*time.Hour, "token lifetime")
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	if user <= 0 {
		fmt.Fprintln(stderr, "token: --user must be a positive user id")
		fs.Usage()
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
	token, err := tokens.Mint(auth.Identity{UserID: user, Admin: admin}, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}
